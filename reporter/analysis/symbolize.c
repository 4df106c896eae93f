/* symbolize.c - addresses to function, module and source line. */
#define _GNU_SOURCE
#include "symbolize.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef PLR_HAVE_LIBDW
#include <dwarf.h>
#include <elfutils/libdwfl.h>
#else
#include <elf.h>
#include <sys/mman.h>
#include <sys/stat.h>
#endif

#include "units.h"

/* addr2line (without libdw) and c++filt take their inputs as arguments:
 * keep each command line short. */
#define PLR_A2L_BATCH 256
/* Output of one tool run we are willing to hold. */
#define PLR_TOOL_MAX_OUTPUT (64u << 20)

void plr_sym_init(plr_symbolizer *s, const plr_trace *t, int use_tools) {
  memset(s, 0, sizeof *s);
  s->t = t;
  s->use_tools = use_tools;
}

const char *plr_module_file(const plr_trace *t, const plr_module *m) {
  return m->path[0] ? m->path : t->exe;
}

int plr_sym_want(plr_symbolizer *s, uint64_t addr) {
  plr_frame *f;
  HASH_FIND(hh, s->frames, &addr, sizeof addr, f);
  if (f) return 0;
  f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->addr = addr;
  f->mod = plr_trace_module(s->t, addr);
  if (f->mod) {
    const char *file = plr_module_file(s->t, f->mod);
    f->module = strdup(file[0] ? plr_basename(file) : "?");
  }
  plr_symbol *sym;
  HASH_FIND(hh, s->t->symbols, &addr, sizeof addr, sym);
  if (sym && sym->name[0]) {
    f->func = strdup(sym->name);
    if (sym->sym_addr && sym->sym_addr <= addr) {
      f->func_off = addr - sym->sym_addr;
      f->have_func_off = 1;
    }
  }
  HASH_ADD(hh, s->frames, addr, sizeof f->addr, f);
  return 0;
}

const plr_frame *plr_sym_get(const plr_symbolizer *s, uint64_t addr) {
  plr_frame *f;
  HASH_FIND(hh, s->frames, &addr, sizeof addr, f);
  return f;
}

/* Runs argv[0] (searched in PATH) with stdin and stderr on /dev/null and
 * returns its whole stdout, NUL-terminated, or NULL when it could not run.
 * LD_PRELOAD is dropped so a shim in our environment never traces a tool. */
static char *plr_run_capture(char *const argv[]) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return NULL;
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return NULL;
  }
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
      dup2(null, 0);
      dup2(null, 2);
    }
    dup2(p[1], 1);
    unsetenv("LD_PRELOAD");
    execvp(argv[0], argv);
    _exit(127);
  }
  close(p[1]);
  size_t len = 0, cap = 1 << 16;
  char *out = malloc(cap);
  int ok = out != NULL;
  while (ok) {
    if (len + 1 >= cap) {
      if (cap >= PLR_TOOL_MAX_OUTPUT) {
        ok = 0;
        break;
      }
      char *n = realloc(out, cap * 2);
      if (!n) {
        ok = 0;
        break;
      }
      out = n;
      cap *= 2;
    }
    ssize_t k = read(p[0], out + len, cap - 1 - len);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    len += (size_t)k;
  }
  close(p[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    free(out);
    return NULL;
  }
  out[len] = 0;
  return out;
}

/* Splits the next line off *cur (destructively); NULL at the end. */
static char *plr_next_line(char **cur) {
  char *s = *cur;
  if (!s || !*s) return NULL;
  char *nl = strchr(s, '\n');
  if (nl) {
    *nl = 0;
    *cur = nl + 1;
  } else {
    *cur = s + strlen(s);
  }
  return s;
}

#ifndef PLR_HAVE_LIBDW
/* Stores addr2line's "file:line" answer into f unless it is "??". */
static void plr_set_fileline(plr_frame *f, char *fl) {
  char *disc = strstr(fl, " (discriminator");
  if (disc) *disc = 0;
  char *colon = strrchr(fl, ':');
  if (!colon) return;
  *colon = 0;
  if (!fl[0] || strcmp(fl, "??") == 0) return;
  free(f->file);
  f->file = strdup(fl);
  f->line = (unsigned)strtoul(colon + 1, NULL, 10);
}

/* Names fs[0..n) of one module from its own symbol table (.symtab, else
 * .dynsym), by the function symbol whose size covers each address: what
 * libdw does, for builds without it. */
static void plr_elf_names(const char *file, plr_frame **fs, size_t n) {
  int fd = open(file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  void *map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(Elf64_Ehdr))
    map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return;
  size_t size = (size_t)st.st_size;
  const unsigned char *b = map;
  const Elf64_Ehdr *eh = map;
  const Elf64_Shdr *sh = NULL;
  if (memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
      eh->e_shentsize == sizeof(Elf64_Shdr) && eh->e_shoff < size &&
      eh->e_shnum <= (size - eh->e_shoff) / sizeof(Elf64_Shdr))
    sh = (const Elf64_Shdr *)(b + eh->e_shoff);
  const Elf64_Shdr *tab = NULL;
  for (unsigned i = 0; sh && i < eh->e_shnum; i++)
    if (sh[i].sh_type == SHT_SYMTAB || (sh[i].sh_type == SHT_DYNSYM && !tab)) tab = &sh[i];
  const Elf64_Shdr *str = tab && tab->sh_link < eh->e_shnum ? &sh[tab->sh_link] : NULL;
  if (str && tab->sh_offset <= size && tab->sh_size <= size - tab->sh_offset &&
      str->sh_offset <= size && str->sh_size <= size - str->sh_offset) {
    const Elf64_Sym *sym = (const Elf64_Sym *)(b + tab->sh_offset);
    size_t nsym = tab->sh_size / sizeof *sym;
    const char *names = (const char *)(b + str->sh_offset);
    for (size_t i = 0; i < n; i++) {
      /* Frames are return addresses: the call is the byte before. */
      uint64_t v = fs[i]->addr - fs[i]->mod->base;
      if (v) v--;
      for (size_t k = 0; k < nsym; k++) {
        const Elf64_Sym *y = &sym[k];
        if (ELF64_ST_TYPE(y->st_info) != STT_FUNC || y->st_shndx == SHN_UNDEF || !y->st_size ||
            v - y->st_value >= y->st_size || y->st_name >= str->sh_size)
          continue;
        const char *nm = names + y->st_name;
        if (!nm[0] || !memchr(nm, 0, str->sh_size - y->st_name)) continue;
        char *d = strdup(nm);
        if (!d) break;
        free(fs[i]->func);
        fs[i]->func = d;
        fs[i]->func_off = v - y->st_value + 1;
        fs[i]->have_func_off = 1;
        break;
      }
    }
  }
  munmap(map, size);
}

/* One addr2line run over up to PLR_A2L_BATCH frames of one module. */
static void plr_a2l_batch(const char *file, plr_frame **fs, size_t n) {
  char *argv[PLR_A2L_BATCH + 6];
  char addrs[PLR_A2L_BATCH][24];
  size_t a = 0;
  argv[a++] = "addr2line";
  argv[a++] = "-f";
  argv[a++] = "-C";
  argv[a++] = "-e";
  argv[a++] = (char *)file;
  for (size_t i = 0; i < n; i++) {
    /* Frames are return addresses: the call is the byte before. */
    uint64_t off = fs[i]->addr - fs[i]->mod->base;
    if (off > 0) off--;
    snprintf(addrs[i], sizeof addrs[i], "0x%llx", (unsigned long long)off);
    argv[a++] = addrs[i];
  }
  argv[a] = NULL;
  char *out = plr_run_capture(argv);
  if (!out) return;
  char *cur = out;
  for (size_t i = 0; i < n; i++) {
    char *fn = plr_next_line(&cur);
    char *fl = plr_next_line(&cur);
    if (!fn || !fl) break;
    plr_set_fileline(fs[i], fl);
    /* Without debug information addr2line names the nearest symbol before
     * the address, whatever its size (__cudaGetProcAddress for most of
     * libcudart): its name is taken only where DWARF placed the address
     * in a function (the symbol table's are plr_elf_names'). */
    if (fn[0] && strcmp(fn, "??") != 0 && fs[i]->file) {
      free(fs[i]->func);
      fs[i]->func = strdup(fn);
      fs[i]->have_func_off = 0;
    }
  }
  free(out);
}

#endif

/* qsort order grouping frames by module, so addr2line runs once per
 * module. */
static int plr_cmp_frame_mod(const void *a, const void *b) {
  const plr_frame *x = *(const plr_frame *const *)a;
  const plr_frame *y = *(const plr_frame *const *)b;
  if (x->mod != y->mod) return x->mod < y->mod ? -1 : 1;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Demangles the _Z names that came from SYMBOL records with one c++filt. */
static void plr_demangle(plr_symbolizer *s) {
  size_t n = 0;
  plr_frame *f, *tmp;
  HASH_ITER(hh, s->frames, f, tmp) if (f->func && strncmp(f->func, "_Z", 2) == 0) n++;
  if (!n) return;
  plr_frame **fs = malloc(n * sizeof *fs);
  char **argv = malloc((PLR_A2L_BATCH + 2) * sizeof *argv);
  if (!fs || !argv) goto out;
  n = 0;
  HASH_ITER(hh, s->frames, f, tmp) if (f->func && strncmp(f->func, "_Z", 2) == 0) fs[n++] = f;
  for (size_t i = 0; i < n; i += PLR_A2L_BATCH) {
    size_t m = n - i < PLR_A2L_BATCH ? n - i : PLR_A2L_BATCH;
    argv[0] = "c++filt";
    for (size_t j = 0; j < m; j++) argv[j + 1] = fs[i + j]->func;
    argv[m + 1] = NULL;
    char *res = plr_run_capture(argv);
    if (!res) break;
    char *cur = res;
    for (size_t j = 0; j < m; j++) {
      char *line = plr_next_line(&cur);
      if (!line) break;
      if (line[0]) {
        char *d = strdup(line);
        if (d) {
          free(fs[i + j]->func);
          fs[i + j]->func = d;
        }
      }
    }
    free(res);
  }
out:
  free(fs);
  free(argv);
}

#ifdef PLR_HAVE_LIBDW
/* The innermost function DWARF places a at (an inlined one's name, so
 * that it agrees with the line), mangled when DWARF has the linkage
 * name; NULL when no DWARF covers a. */
static const char *plr_dw_function(Dwfl_Module *m, Dwarf_Addr a) {
  Dwarf_Addr bias;
  Dwarf_Die *cu = dwfl_module_addrdie(m, a, &bias);
  if (!cu) return NULL;
  Dwarf_Die *scopes = NULL;
  int n = dwarf_getscopes(cu, a - bias, &scopes);
  const char *name = NULL;
  for (int i = 0; i < n && !name; i++) {
    int tag = dwarf_tag(&scopes[i]);
    if (tag != DW_TAG_subprogram && tag != DW_TAG_inlined_subroutine) continue;
    Dwarf_Attribute at;
    name = dwarf_formstring(dwarf_attr_integrate(&scopes[i], DW_AT_linkage_name, &at));
    if (!name)
      name = dwarf_formstring(dwarf_attr_integrate(&scopes[i], DW_AT_MIPS_linkage_name, &at));
    if (!name) name = dwarf_formstring(dwarf_attr_integrate(&scopes[i], DW_AT_name, &at));
    if (!name) break; /* a function with no name: say none */
  }
  free(scopes);
  return name;
}

/* Names the frames fs[0..n) of one module, loaded at base, from the
 * module's symbol table (.symtab, else that of its debuglink or build-id
 * debug file, else .dynsym) and its DWARF.  A symbol names an address
 * only when its size covers it: the nearest symbol before an address is
 * no name for it. */
static void plr_dw_module(const char *file, uint64_t base, plr_frame **fs, size_t n) {
  static char *debuginfo_path = NULL; /* libdwfl's default search */
  static const Dwfl_Callbacks cb = {
      .find_elf = dwfl_build_id_find_elf,
      .find_debuginfo = dwfl_standard_find_debuginfo,
      .section_address = dwfl_offline_section_address,
      .debuginfo_path = &debuginfo_path,
  };
  Dwfl *d = dwfl_begin(&cb);
  if (!d) return;
  dwfl_report_begin(d);
  Dwfl_Module *m = dwfl_report_elf(d, plr_basename(file), file, -1, base, false);
  dwfl_report_end(d, NULL, NULL);
  for (size_t i = 0; m && i < n; i++) {
    plr_frame *f = fs[i];
    /* Frames are return addresses: the call is the byte before. */
    Dwarf_Addr a = f->addr > 0 ? f->addr - 1 : 0;
    GElf_Off off = 0;
    GElf_Sym sym;
    const char *name = dwfl_module_addrinfo(m, a, &off, &sym, NULL, NULL, NULL);
    if (name && (!name[0] || sym.st_size == 0 || off >= sym.st_size)) name = NULL;
    const char *dw = plr_dw_function(m, a);
    if (dw || name) {
      char *v = strdup(dw ? dw : name);
      if (v) {
        free(f->func);
        f->func = v;
        /* The offset is the symbol's: shown only when the name is too. */
        f->have_func_off = name && (!dw || strcmp(dw, name) == 0);
        f->func_off = f->have_func_off ? off + 1 : 0;
      }
    }
    Dwfl_Line *l = dw ? dwfl_module_getsrc(m, a) : NULL;
    int line = 0;
    const char *src = l ? dwfl_lineinfo(l, NULL, &line, NULL, NULL, NULL) : NULL;
    if (src && src[0]) {
      char *v = strdup(src);
      if (v) {
        free(f->file);
        f->file = v;
        f->line = line > 0 ? (unsigned)line : 0;
      }
    }
  }
  dwfl_end(d);
}
#endif

void plr_sym_resolve(plr_symbolizer *s) {
  if (!s->use_tools) return;
  size_t n = 0;
  plr_frame *f, *tmp;
  HASH_ITER(hh, s->frames, f, tmp) if (f->mod) n++;
  plr_frame **fs = n ? malloc(n * sizeof *fs) : NULL;
  if (fs) {
    n = 0;
    HASH_ITER(hh, s->frames, f, tmp) if (f->mod) fs[n++] = f;
    qsort(fs, n, sizeof *fs, plr_cmp_frame_mod);
    for (size_t i = 0; i < n;) {
      size_t j = i;
      while (j < n && fs[j]->mod == fs[i]->mod) j++;
      const char *file = plr_module_file(s->t, fs[i]->mod);
      /* A module that vanished (or a pseudo-path like linux-vdso) keeps the
       * module+offset form. */
      if (file[0] == '/' && access(file, R_OK) == 0) {
#ifdef PLR_HAVE_LIBDW
        plr_dw_module(file, fs[i]->mod->base, fs + i, j - i);
#else
        plr_elf_names(file, fs + i, j - i);
        for (size_t k = i; k < j; k += PLR_A2L_BATCH)
          plr_a2l_batch(file, fs + k, j - k < PLR_A2L_BATCH ? j - k : PLR_A2L_BATCH);
#endif
      }
      i = j;
    }
    free(fs);
  }
  /* Symbol tables and DWARF hold C++ names mangled. */
  plr_demangle(s);
}

void plr_sym_free(plr_symbolizer *s) {
  plr_frame *f, *tmp;
  HASH_ITER(hh, s->frames, f, tmp) {
    HASH_DEL(s->frames, f);
    free(f->module);
    free(f->func);
    free(f->file);
    free(f);
  }
}
