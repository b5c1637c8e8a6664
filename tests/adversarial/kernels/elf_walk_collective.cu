// Exploit: call the harness all-reduce on a task that forbids it, through an
// address found at run time (no import of kf_all_reduce, no dlsym): walk the
// worker executable's own ELF dynamic symbol table from the auxiliary vector,
// then ignore whatever the call returns. Expected: policy_violation ("kf_run
// called kf_all_reduce"): the collectives of a candidate process that may not
// use them refuse every call, and a refusal is a violation whatever the kernel
// returns.
#include <elf.h>
#include <stdint.h>
#include <string.h>
#include <sys/auxv.h>

#include "kforge/kernel.h"

namespace walk {

typedef int (*AllReduce)(kf_ctx*, const void*, void*, size_t, kf_dtype, kf_redop);

AllReduce Find() {
  const Elf64_Phdr* ph = reinterpret_cast<const Elf64_Phdr*>(getauxval(AT_PHDR));
  const unsigned long n = getauxval(AT_PHNUM);
  uintptr_t bias = 0;
  const Elf64_Dyn* dyn = nullptr;
  for (unsigned long i = 0; i < n; ++i)
    if (ph[i].p_type == PT_PHDR) bias = reinterpret_cast<uintptr_t>(ph) - ph[i].p_vaddr;
  for (unsigned long i = 0; i < n; ++i)
    if (ph[i].p_type == PT_DYNAMIC) dyn = reinterpret_cast<const Elf64_Dyn*>(bias + ph[i].p_vaddr);
  if (dyn == nullptr) return nullptr;
  uintptr_t symtab = 0, strtab = 0;
  for (; dyn->d_tag != DT_NULL; ++dyn) {
    if (dyn->d_tag == DT_SYMTAB) symtab = dyn->d_un.d_ptr;
    if (dyn->d_tag == DT_STRTAB) strtab = dyn->d_un.d_ptr;
  }
  if (symtab < bias) symtab += bias;  // not relocated in place on this arch
  if (strtab < bias) strtab += bias;
  const Elf64_Sym* sym = reinterpret_cast<const Elf64_Sym*>(symtab);
  const size_t count = strtab > symtab ? (strtab - symtab) / sizeof(Elf64_Sym) : 0;
  for (size_t i = 0; i < count; ++i) {
    const char* name = reinterpret_cast<const char*>(strtab) + sym[i].st_name;
    if (sym[i].st_value != 0 && strcmp(name, "kf_all_reduce") == 0)
      return reinterpret_cast<AllReduce>(bias + sym[i].st_value);
  }
  return nullptr;
}

}  // namespace walk

extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_run(kf_ctx* ctx) {
  static walk::AllReduce all_reduce = walk::Find();
  if (all_reduce == nullptr) return 7;  // the walk failed: a runtime error, not a pass
  (void)all_reduce(ctx, ctx->inputs[0].data, ctx->outputs[0].data, ctx->outputs[0].numel,
                   ctx->outputs[0].dtype, KF_SUM);
  return 0;
}
extern "C" int kf_teardown(kf_ctx*) { return 0; }
