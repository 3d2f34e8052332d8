// Checks a shared object's dynamic section before dlopen reads it. ld.so
// trusts every address and size there: a string table, symbol table, hash
// table or relocation table that points outside the file, a hash table
// whose counts run past it, or a relocation that names a symbol the table
// does not hold makes dlopen itself fault. Each table the loader reads is
// located through the loadable segments and must lie inside the file's
// bytes; the dynamic entries that name strings must name them inside the
// string table.
#include "RuntimeInternal.h"

#include <elf.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace mhagen::rt {

namespace {

constexpr bool k64 = sizeof(void *) == 8;
using Ehdr = std::conditional_t<k64, Elf64_Ehdr, Elf32_Ehdr>;
using Phdr = std::conditional_t<k64, Elf64_Phdr, Elf32_Phdr>;
using Dyn = std::conditional_t<k64, Elf64_Dyn, Elf32_Dyn>;
using Sym = std::conditional_t<k64, Elf64_Sym, Elf32_Sym>;
using Rela = std::conditional_t<k64, Elf64_Rela, Elf32_Rela>;
using Rel = std::conditional_t<k64, Elf64_Rel, Elf32_Rel>;
using Verneed = std::conditional_t<k64, Elf64_Verneed, Elf32_Verneed>;
using Vernaux = std::conditional_t<k64, Elf64_Vernaux, Elf32_Vernaux>;
using Verdef = std::conditional_t<k64, Elf64_Verdef, Elf32_Verdef>;
using Verdaux = std::conditional_t<k64, Elf64_Verdaux, Elf32_Verdaux>;
using Word = std::conditional_t<k64, uint64_t, uint32_t>;

uint64_t relSym(uint64_t info) { return k64 ? info >> 32 : info >> 8; }

// The file seen through its loadable segments, as ld.so maps it.
class Image {
public:
  Image(const unsigned char *bytes, uint64_t size, std::vector<Phdr> loads)
      : bytes_(bytes), size_(size), loads_(std::move(loads)) {}

  // The file offset of [addr, addr + len), or nothing when those bytes
  // are not all backed by one segment's file contents.
  std::optional<uint64_t> offsetOf(uint64_t addr, uint64_t len) const {
    for (const Phdr &ph : loads_) {
      if (addr < ph.p_vaddr || addr - ph.p_vaddr > ph.p_filesz)
        continue;
      const uint64_t into = addr - ph.p_vaddr;
      if (len > ph.p_filesz - into)
        continue;
      return static_cast<uint64_t>(ph.p_offset) + into; // inside the file
    }
    return std::nullopt;
  }
  // Whether [addr, addr + len) lies in one segment's memory (relocation
  // targets may lie in .bss, past the file contents).
  bool mapped(uint64_t addr, uint64_t len) const {
    for (const Phdr &ph : loads_)
      if (addr >= ph.p_vaddr && addr - ph.p_vaddr <= ph.p_memsz &&
          len <= ph.p_memsz - (addr - ph.p_vaddr))
        return true;
    return false;
  }
  template <typename T> T read(uint64_t offset) const {
    T v;
    std::memcpy(&v, bytes_ + offset, sizeof(T));
    return v;
  }
  uint64_t size() const { return size_; }

private:
  const unsigned char *bytes_;
  uint64_t size_;
  std::vector<Phdr> loads_;
};

struct Tables {
  std::optional<uint64_t> strtab, strsz, symtab, hash, gnuHash, rela, relasz,
      rel, relsz, jmprel, pltrelsz, pltrel, versym, verneed, verneednum,
      verdef, verdefnum, initArray, initArraySz, finiArray, finiArraySz;
  std::vector<std::pair<const char *, uint64_t>> names; // string offsets
};

class DynamicCheck {
public:
  explicit DynamicCheck(const Image &img) : img_(img) {}

  // "" when the dynamic section is sound, else why not.
  std::string run(const Phdr &dynamic) {
    if (std::string why = readEntries(dynamic); !why.empty())
      return why;
    if (!t_.strtab || !t_.strsz || !t_.symtab)
      return "no string or symbol table";
    auto str = img_.offsetOf(*t_.strtab, *t_.strsz);
    if (!str || *t_.strsz == 0)
      return "the string table lies outside the file";
    strOff_ = *str;
    // A table that ends in NUL ends every string that starts inside it.
    if (img_.read<char>(strOff_ + *t_.strsz - 1) != '\0')
      return "the string table does not end in NUL";
    for (const auto &[tag, at] : t_.names)
      if (!stringAt(at))
        return std::string(tag) + " names a string outside the string table";
    if (std::string why = countSymbols(); !why.empty())
      return why;
    auto syms = img_.offsetOf(*t_.symtab, nsyms_ * sizeof(Sym));
    if (!syms)
      return "the symbol table (" + std::to_string(nsyms_) +
             " symbols) lies outside the file";
    for (uint64_t i = 0; i < nsyms_; ++i)
      if (!stringAt(img_.read<Sym>(*syms + i * sizeof(Sym)).st_name))
        return "symbol " + std::to_string(i) +
               " names a string outside the string table";
    for (std::string why : {relocations(), arrays(), versions()})
      if (!why.empty())
        return why;
    return "";
  }

private:
  std::string readEntries(const Phdr &dynamic) {
    const uint64_t n = dynamic.p_filesz / sizeof(Dyn);
    for (uint64_t i = 0; i < n; ++i) {
      const Dyn d =
          img_.read<Dyn>(static_cast<uint64_t>(dynamic.p_offset) + i * sizeof(Dyn));
      const uint64_t v = d.d_un.d_val;
      switch (d.d_tag) {
      case DT_NULL:
        return "";
      case DT_STRTAB: t_.strtab = v; break;
      case DT_STRSZ: t_.strsz = v; break;
      case DT_SYMTAB: t_.symtab = v; break;
      case DT_SYMENT:
        if (v != sizeof(Sym))
          return "symbol entries of " + std::to_string(v) + " bytes";
        break;
      case DT_HASH: t_.hash = v; break;
      case DT_GNU_HASH: t_.gnuHash = v; break;
      case DT_RELA: t_.rela = v; break;
      case DT_RELASZ: t_.relasz = v; break;
      case DT_RELAENT:
        if (v != sizeof(Rela))
          return "relocation entries of " + std::to_string(v) + " bytes";
        break;
      case DT_REL: t_.rel = v; break;
      case DT_RELSZ: t_.relsz = v; break;
      case DT_RELENT:
        if (v != sizeof(Rel))
          return "relocation entries of " + std::to_string(v) + " bytes";
        break;
      case DT_JMPREL: t_.jmprel = v; break;
      case DT_PLTRELSZ: t_.pltrelsz = v; break;
      case DT_PLTREL: t_.pltrel = v; break;
      case DT_VERSYM: t_.versym = v; break;
      case DT_VERNEED: t_.verneed = v; break;
      case DT_VERNEEDNUM: t_.verneednum = v; break;
      case DT_VERDEF: t_.verdef = v; break;
      case DT_VERDEFNUM: t_.verdefnum = v; break;
      case DT_INIT_ARRAY: t_.initArray = v; break;
      case DT_INIT_ARRAYSZ: t_.initArraySz = v; break;
      case DT_FINI_ARRAY: t_.finiArray = v; break;
      case DT_FINI_ARRAYSZ: t_.finiArraySz = v; break;
      case DT_NEEDED: t_.names.emplace_back("DT_NEEDED", v); break;
      case DT_SONAME: t_.names.emplace_back("DT_SONAME", v); break;
      case DT_RPATH: t_.names.emplace_back("DT_RPATH", v); break;
      case DT_RUNPATH: t_.names.emplace_back("DT_RUNPATH", v); break;
      default: break;
      }
    }
    return "the dynamic section has no DT_NULL end";
  }

  // Whether offset `at` of the string table starts a string (the table
  // ends in NUL, so every string inside it ends inside it).
  bool stringAt(uint64_t at) const { return at < *t_.strsz; }

  // Whether symbol `index` lies in the file and names a string in the
  // string table.
  bool symbolAt(uint64_t index) const {
    if (index >= img_.size() / sizeof(Sym))
      return false;
    auto at = img_.offsetOf(*t_.symtab + index * sizeof(Sym), sizeof(Sym));
    return at && stringAt(img_.read<Sym>(*at).st_name) &&
           (!t_.versym || img_.offsetOf(*t_.versym + 2 * index, 2));
  }

  // The symbol count, from the hash table ld.so looks symbols up in.
  std::string countSymbols() {
    if (t_.hash) {
      auto head = img_.offsetOf(*t_.hash, 8);
      if (!head)
        return "the hash table lies outside the file";
      const uint64_t nbucket = img_.read<uint32_t>(*head);
      const uint64_t nchain = img_.read<uint32_t>(*head + 4);
      auto all = img_.offsetOf(*t_.hash, 8 + 4 * (nbucket + nchain));
      if (!all)
        return "the hash table (" + std::to_string(nbucket) + " buckets, " +
               std::to_string(nchain) + " chains) does not fit in the file";
      for (uint64_t i = 0; i < nbucket + nchain; ++i)
        if (img_.read<uint32_t>(*all + 8 + 4 * i) >= nchain)
          return "the hash table names a symbol past its chain count";
      nsyms_ = nchain;
      return "";
    }
    if (!t_.gnuHash)
      return "no symbol hash table";
    auto head = img_.offsetOf(*t_.gnuHash, 16);
    if (!head)
      return "the GNU hash table lies outside the file";
    const uint64_t nbuckets = img_.read<uint32_t>(*head);
    const uint64_t symoffset = img_.read<uint32_t>(*head + 4);
    const uint64_t bloomWords = img_.read<uint32_t>(*head + 8);
    const uint64_t tableBytes = 16 + bloomWords * sizeof(Word) + 4 * nbuckets;
    auto table = img_.offsetOf(*t_.gnuHash, tableBytes);
    if (!table || nbuckets == 0)
      return "the GNU hash table (" + std::to_string(nbuckets) + " buckets, " +
             std::to_string(bloomWords) + " bloom words) does not fit in the file";
    const uint64_t buckets = *table + 16 + bloomWords * sizeof(Word);
    uint64_t last = 0;
    for (uint64_t i = 0; i < nbuckets; ++i)
      last = std::max<uint64_t>(last, img_.read<uint32_t>(buckets + 4 * i));
    nsyms_ = symoffset;
    if (last < symoffset)
      return "";
    // Chains start after the buckets, one word per symbol from symoffset;
    // the last symbol's chain word has its low bit set.
    const uint64_t chains = *t_.gnuHash + tableBytes;
    for (uint64_t s = last;; ++s) {
      auto w = img_.offsetOf(chains + 4 * (s - symoffset), 4);
      if (!w)
        return "a GNU hash chain runs past the end of the file";
      if (img_.read<uint32_t>(*w) & 1u) {
        nsyms_ = s + 1;
        return "";
      }
    }
  }

  template <typename R>
  std::string relocationTable(const char *what, std::optional<uint64_t> at,
                              std::optional<uint64_t> bytes) {
    if (!at && !bytes)
      return "";
    if (!at || !bytes || *bytes % sizeof(R) != 0)
      return std::string(what) + " relocations without a sound address and size";
    auto off = img_.offsetOf(*at, *bytes);
    if (!off)
      return std::string(what) + " relocations lie outside the file";
    for (uint64_t i = 0; i < *bytes / sizeof(R); ++i) {
      const R r = img_.read<R>(*off + i * sizeof(R));
      // ld.so indexes the symbol table directly (the hash table counts
      // only the symbols it looks up), so the symbol itself must lie in
      // the file and name a string in the table.
      if (!symbolAt(relSym(r.r_info)))
        return std::string(what) + " relocation " + std::to_string(i) +
               " names symbol " + std::to_string(relSym(r.r_info)) +
               ", which lies outside the file or names no string";
      if (!img_.mapped(r.r_offset, sizeof(Word)))
        return std::string(what) + " relocation " + std::to_string(i) +
               " writes outside the loaded segments";
    }
    return "";
  }

  std::string relocations() {
    if (std::string why = relocationTable<Rela>("RELA", t_.rela, t_.relasz);
        !why.empty())
      return why;
    if (std::string why = relocationTable<Rel>("REL", t_.rel, t_.relsz);
        !why.empty())
      return why;
    if (t_.jmprel && t_.pltrel && *t_.pltrel == DT_REL)
      return relocationTable<Rel>("PLT", t_.jmprel, t_.pltrelsz);
    return relocationTable<Rela>("PLT", t_.jmprel, t_.pltrelsz);
  }

  std::string arrays() {
    const std::pair<std::optional<uint64_t>, std::optional<uint64_t>> arrays[] =
        {{t_.initArray, t_.initArraySz}, {t_.finiArray, t_.finiArraySz}};
    for (const auto &[at, bytes] : arrays)
      if ((at || bytes) && (!at || !bytes || !img_.mapped(*at, *bytes)))
        return "a constructor or destructor array lies outside the segments";
    return "";
  }

  // Version needs and definitions: linked lists that ld.so walks.
  std::string versions() {
    if (t_.versym && !img_.offsetOf(*t_.versym, 2 * nsyms_))
      return "the symbol version table lies outside the file";
    if (t_.verneed) {
      uint64_t at = *t_.verneed;
      if (t_.verneednum.value_or(0) > img_.size() / sizeof(Verneed))
        return "more version needs than the file can hold";
      for (uint64_t i = 0; i < t_.verneednum.value_or(0); ++i) {
        auto off = img_.offsetOf(at, sizeof(Verneed));
        if (!off)
          return "a version need lies outside the file";
        const Verneed vn = img_.read<Verneed>(*off);
        if (!stringAt(vn.vn_file))
          return "a version need names a string outside the string table";
        uint64_t aux = at + vn.vn_aux;
        for (uint64_t j = 0; j < vn.vn_cnt; ++j) {
          auto a = img_.offsetOf(aux, sizeof(Vernaux));
          if (!a || !stringAt(img_.read<Vernaux>(*a).vna_name))
            return "a version need's entry lies outside the file";
          aux += img_.read<Vernaux>(*a).vna_next;
        }
        at += vn.vn_next;
      }
    }
    if (t_.verdef) {
      uint64_t at = *t_.verdef;
      if (t_.verdefnum.value_or(0) > img_.size() / sizeof(Verdef))
        return "more version definitions than the file can hold";
      for (uint64_t i = 0; i < t_.verdefnum.value_or(0); ++i) {
        auto off = img_.offsetOf(at, sizeof(Verdef));
        if (!off)
          return "a version definition lies outside the file";
        const Verdef vd = img_.read<Verdef>(*off);
        uint64_t aux = at + vd.vd_aux;
        for (uint64_t j = 0; j < vd.vd_cnt; ++j) {
          auto a = img_.offsetOf(aux, sizeof(Verdaux));
          if (!a || !stringAt(img_.read<Verdaux>(*a).vda_name))
            return "a version definition's name lies outside the file";
          aux += img_.read<Verdaux>(*a).vda_next;
        }
        at += vd.vd_next;
      }
    }
    return "";
  }

  const Image &img_;
  Tables t_;
  uint64_t strOff_ = 0;
  uint64_t nsyms_ = 0;
};

} // namespace

std::string checkElfDynamic(const unsigned char *bytes, uint64_t size) {
  const Ehdr eh = [&] {
    Ehdr h;
    std::memcpy(&h, bytes, sizeof(h));
    return h;
  }();
  if (eh.e_phentsize != sizeof(Phdr))
    return "program headers of " + std::to_string(eh.e_phentsize) + " bytes";
  // e_phnum itself (not an extended count): ld.so reads that many.
  if (eh.e_phoff > size ||
      uint64_t{eh.e_phnum} * sizeof(Phdr) > size - eh.e_phoff)
    return "program headers lie past the end of the file";
  std::vector<Phdr> loads;
  std::optional<Phdr> dynamic;
  for (uint64_t i = 0; i < eh.e_phnum; ++i) {
    Phdr ph;
    std::memcpy(&ph, bytes + eh.e_phoff + i * eh.e_phentsize, sizeof(ph));
    if (ph.p_type == PT_LOAD)
      loads.push_back(ph);
    if (ph.p_type == PT_DYNAMIC) {
      if (dynamic)
        return "more than one dynamic segment";
      dynamic = ph;
    }
  }
  if (!dynamic)
    return "no dynamic segment";
  Image img(bytes, size, std::move(loads));
  // ld.so reads the dynamic section through its address, not its offset.
  auto at = img.offsetOf(dynamic->p_vaddr, dynamic->p_filesz);
  if (!at || *at != dynamic->p_offset)
    return "the dynamic segment does not lie where its loadable segment maps it";
  DynamicCheck check(img);
  const std::string why = check.run(*dynamic);
  return why.empty() ? "" : "dynamic section: " + why;
}

} // namespace mhagen::rt
