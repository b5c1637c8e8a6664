#include "elf_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

namespace kforge::eval {
namespace {

// A read-only mapping of a whole file; libraries such as libnccl are hundreds
// of MB, and only their small symbol sections are touched.
class MappedFile {
 public:
  ~MappedFile() {
    if (data_ != nullptr) munmap(const_cast<char*>(data_), size_);
  }
  Status Open(const std::filesystem::path& path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return Error(errno == ENOENT ? ErrorKind::kNotFound : ErrorKind::kIo,
                   path.string() + ": " + std::strerror(errno));
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_size <= 0) {
      close(fd);
      return Error(ErrorKind::kInvalidInput, path.string() + ": empty or unreadable file");
    }
    size_ = static_cast<size_t>(st.st_size);
    void* p = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
      return Error(ErrorKind::kIo, path.string() + ": mmap: " + std::strerror(errno));
    data_ = static_cast<const char*>(p);
    return Status::Ok();
  }
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

bool InBounds(size_t offset, size_t length, size_t total) {
  return offset <= total && length <= total - offset;
}

// A NUL-terminated string at `offset` inside [base, base + size); empty when out of range.
std::string_view StringAt(const char* base, size_t size, uint64_t offset) {
  if (offset >= size) return {};
  const char* s = base + offset;
  const void* end = memchr(s, '\0', size - offset);
  if (end == nullptr) return {};
  return std::string_view(s, static_cast<const char*>(end) - s);
}

std::string ExpandOrigin(std::string entry, const std::filesystem::path& dir) {
  for (std::string_view token : {"$ORIGIN", "${ORIGIN}"}) {
    for (size_t at = entry.find(token); at != std::string::npos; at = entry.find(token)) {
      entry.replace(at, token.size(), dir.string());
    }
  }
  return entry;
}

}  // namespace

Result<DynamicInfo> ReadDynamicInfo(const std::filesystem::path& path) {
  MappedFile file;
  KF_RETURN_IF_ERROR(file.Open(path));
  const char* base = file.data();
  const size_t size = file.size();
  auto bad = [&](std::string_view why) {
    return Error(ErrorKind::kInvalidInput, path.string() + ": " + std::string(why));
  };
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(base, ELFMAG, SELFMAG) != 0)
    return bad("not an ELF file");
  Elf64_Ehdr eh;
  std::memcpy(&eh, base, sizeof(eh));
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return bad("not a 64-bit little-endian ELF object");
  }
  if (eh.e_shentsize != sizeof(Elf64_Shdr) ||
      !InBounds(eh.e_shoff, size_t{eh.e_shnum} * sizeof(Elf64_Shdr), size)) {
    return bad("section headers out of range");
  }
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, base + eh.e_shoff + i * sizeof(Elf64_Shdr), sizeof(sh));
    return sh;
  };
  // The string table a section links to, as (pointer, size); null when invalid.
  auto linked_strings = [&](const Elf64_Shdr& sh) -> std::pair<const char*, size_t> {
    if (sh.sh_link >= eh.e_shnum) return {nullptr, 0};
    Elf64_Shdr str = section(sh.sh_link);
    if (str.sh_type != SHT_STRTAB || !InBounds(str.sh_offset, str.sh_size, size))
      return {nullptr, 0};
    return {base + str.sh_offset, str.sh_size};
  };

  DynamicInfo info;
  bool saw_dynsym = false;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    if (sh.sh_type == SHT_DYNSYM) {
      saw_dynsym = true;
      auto [strings, strings_size] = linked_strings(sh);
      if (strings == nullptr || sh.sh_entsize != sizeof(Elf64_Sym) ||
          !InBounds(sh.sh_offset, sh.sh_size, size)) {
        return bad("malformed .dynsym");
      }
      size_t count = sh.sh_size / sizeof(Elf64_Sym);
      for (size_t s = 1; s < count; ++s) {  // entry 0 is the reserved null symbol
        Elf64_Sym sym;
        std::memcpy(&sym, base + sh.sh_offset + s * sizeof(Elf64_Sym), sizeof(sym));
        std::string_view name = StringAt(strings, strings_size, sym.st_name);
        int bind = ELF64_ST_BIND(sym.st_info);
        if (name.empty() || (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE))
          continue;
        ElfSymbol out{
            std::string(name),
            ELF64_ST_TYPE(sym.st_info) == STT_FUNC || ELF64_ST_TYPE(sym.st_info) == STT_GNU_IFUNC,
            bind == STB_WEAK};
        if (sym.st_shndx == SHN_UNDEF) {
          info.undefined.push_back(std::move(out));
        } else {
          int vis = ELF64_ST_VISIBILITY(sym.st_other);
          if (vis == STV_DEFAULT || vis == STV_PROTECTED) info.exported.push_back(std::move(out));
        }
      }
    } else if (sh.sh_type == SHT_DYNAMIC) {
      auto [strings, strings_size] = linked_strings(sh);
      if (strings == nullptr || !InBounds(sh.sh_offset, sh.sh_size, size))
        return bad("malformed .dynamic");
      size_t count = sh.sh_size / sizeof(Elf64_Dyn);
      for (size_t d = 0; d < count; ++d) {
        Elf64_Dyn dyn;
        std::memcpy(&dyn, base + sh.sh_offset + d * sizeof(Elf64_Dyn), sizeof(dyn));
        if (dyn.d_tag == DT_NULL) break;
        std::string_view value = StringAt(strings, strings_size, dyn.d_un.d_val);
        if (dyn.d_tag == DT_NEEDED && !value.empty()) {
          info.needed.emplace_back(value);
        } else if ((dyn.d_tag == DT_RUNPATH || dyn.d_tag == DT_RPATH) && !value.empty()) {
          std::string list(value);
          size_t start = 0;
          while (start <= list.size()) {
            size_t end = list.find(':', start);
            if (end == std::string::npos) end = list.size();
            if (end > start) {
              info.runpath.push_back(
                  ExpandOrigin(list.substr(start, end - start), path.parent_path()));
            }
            start = end + 1;
          }
        }
      }
    }
  }
  if (!saw_dynsym) return bad("no dynamic symbol table (not a shared object?)");
  return info;
}

}  // namespace kforge::eval
