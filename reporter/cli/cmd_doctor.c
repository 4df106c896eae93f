/* cmd_doctor.c - `pagelock doctor [PROGRAM]`: one screen that answers a
 * new user's first questions (is the GPU visible, will GPU timing work,
 * can the shim reach this program), each problem with its fix.  Exits 1
 * when something blocks recording, else 0. */
#define _GNU_SOURCE
#include <cupti_version.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "help.h"
#include "launch.h"
#include "pagelock/trace_format.h"
#include "pkgdir.h"

/* A driver that hangs in cuInit must not hang the doctor. */
#define PLR_DOCTOR_PROBE_TIMEOUT_S 60
/* Child exit statuses of the probes: the problem is printed by the child. */
#define PLR_PROBE_OK 0
#define PLR_PROBE_WARN 1  /* a problem that does not block recording */
#define PLR_PROBE_BLOCK 2 /* a problem that does */

typedef struct plr_doctor {
  int problems;
  int blocking;
} plr_doctor;

static void plr_problem(plr_doctor *d, int blocks, const char *what, const char *fix) {
  printf("  problem: %s\n  fix: %s\n", what, fix);
  d->problems++;
  if (blocks) d->blocking++;
}

/* Runs fn in a child, so that a broken driver or CUPTI cannot take the
 * doctor down and none of it stays loaded here; fn prints its own lines
 * and returns a PLR_PROBE_* status. */
static int plr_probe(int (*fn)(void *), void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return PLR_PROBE_WARN;
  if (pid == 0) {
    alarm(PLR_DOCTOR_PROBE_TIMEOUT_S);
    int rc = fn(arg);
    fflush(NULL);
    _exit(rc);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  printf("  problem: the probe was killed by signal %d%s\n",
         WIFSIGNALED(status) ? WTERMSIG(status) : 0,
         WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? " (it hung for 60 s)" : "");
  printf("  fix: check the driver install (nvidia-smi)\n");
  return PLR_PROBE_BLOCK;
}

/* ---- GPU ---------------------------------------------------------------- */

static int plr_probe_gpu(void *arg) {
  int *driver_cuda = arg;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf(
        "GPU:       none: libcuda.so.1 not found (no NVIDIA driver)\n"
        "  problem: no GPU answers, so a CUDA program has nothing to run "
        "on (`pagelock demo` runs over the fake CUDA)\n"
        "  fix: install the NVIDIA driver (nvidia-smi must list the GPU)\n");
    return PLR_PROBE_BLOCK;
  }
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  int (*ver)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
  int (*count)(int *) = (int (*)(int *))dlsym(h, "cuDeviceGetCount");
  int (*get)(int *, int) = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
  int (*name)(char *, int, int) = (int (*)(char *, int, int))dlsym(h, "cuDeviceGetName");
  Dl_info info;
  const char *path = "libcuda.so.1";
  if (init && dladdr((void *)init, &info) && info.dli_fname) path = info.dli_fname;
  char kmod[64] = "";
  FILE *f = fopen("/sys/module/nvidia/version", "r");
  if (f) {
    if (fgets(kmod, sizeof kmod, f)) kmod[strcspn(kmod, "\n")] = 0;
    fclose(f);
  }
  int v = 0, n = 0, r;
  if (!init || !ver || !count || !get || !name) {
    printf(
        "GPU:       %s lacks the driver API\n"
        "  problem: this libcuda.so.1 is not an NVIDIA driver's\n"
        "  fix: reinstall the NVIDIA driver\n",
        path);
    return PLR_PROBE_BLOCK;
  }
  ver(&v);
  *driver_cuda = v;
  printf("GPU:       driver %s%s(CUDA %d.%d), %s\n", kmod, kmod[0] ? " " : "", v / 1000,
         v % 1000 / 10, path);
  if ((r = init(0)) != 0 || (r = count(&n)) != 0 || n <= 0) {
    printf(
        "  problem: the driver sees no usable GPU (cuInit or "
        "cuDeviceGetCount: error %d, %d devices)\n"
        "  fix: check nvidia-smi, CUDA_VISIBLE_DEVICES and the device "
        "files' permissions (/dev/nvidia*)\n",
        r, n);
    return PLR_PROBE_BLOCK;
  }
  for (int i = 0; i < n; i++) {
    int dev = 0;
    char nm[256] = "?";
    if (get(&dev, i) == 0) name(nm, sizeof nm, dev);
    printf("           device %d: %s\n", i, nm);
  }
  return PLR_PROBE_OK;
}

/* ---- CUPTI -------------------------------------------------------------- */

/* The shim's search (shim/record/cupti.c, pl_cupti_open): PAGELOCK_CUPTI_LIB, the
 * loader's path, then the toolkit's directories.  The shim also looks next
 * to a libcudart the program has loaded (Python wheels), which only the
 * program itself can tell. */
static void *plr_cupti_open(void) {
  const char *lib = getenv("PAGELOCK_CUPTI_LIB");
  if (lib && lib[0]) return dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  void *h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
  const char *home = getenv("CUDA_HOME");
  if (!home || !home[0]) home = getenv("CUDA_PATH");
  const char *dirs[] = {"/extras/CUPTI/lib64", "/lib64"};
  for (int k = 0; !h && k < 2; k++) {
    const char *base = k == 0 ? home : "/usr/local/cuda";
    for (int j = 0; !h && base && base[0] && j < 2; j++) {
      char p[PATH_MAX];
      snprintf(p, sizeof p, "%.3000s%s/libcupti.so.13", base, dirs[j]);
      h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    }
  }
  return h;
}

static int plr_probe_cupti(void *arg) {
  int driver_cuda = *(int *)arg;
  void *h = plr_cupti_open();
  if (!h) {
    const char *lib = getenv("PAGELOCK_CUPTI_LIB");
    printf(
        "CUPTI:     %s%s%s\n"
        "  problem: no GPU timing: copies are recorded, but not whether "
        "they overlapped kernels\n"
        "  fix: install the CUDA toolkit's CUPTI (cuda-cupti-13-0), or "
        "set PAGELOCK_CUPTI_LIB to a libcupti.so.13\n",
        lib && lib[0] ? "PAGELOCK_CUPTI_LIB cannot be loaded: " : "",
        lib && lib[0] ? dlerror() : "libcupti.so.13 not found", "");
    return PLR_PROBE_WARN;
  }
  int (*gv)(uint32_t *) = (int (*)(uint32_t *))dlsym(h, "cuptiGetVersion");
  Dl_info info;
  const char *path = "?";
  if (gv && dladdr((void *)gv, &info) && info.dli_fname) path = info.dli_fname;
  uint32_t v = 0;
  if (!gv || gv(&v) != 0) {
    printf(
        "CUPTI:     %s has no working cuptiGetVersion\n"
        "  problem: not a CUPTI pagelock can use\n"
        "  fix: set PAGELOCK_CUPTI_LIB to the toolkit's libcupti.so.13\n",
        path);
    return PLR_PROBE_WARN;
  }
  int major = (int)(v / 10000), want = CUPTI_API_VERSION / 10000;
  printf("CUPTI:     %s (API %u, CUDA %d)\n", path, v, major);
  if (major != want) {
    printf(
        "  problem: pagelock reads CUDA %d CUPTI records; this one is "
        "CUDA %d, so GPU timing is off\n"
        "  fix: set PAGELOCK_CUPTI_LIB to a CUDA %d libcupti.so.13\n",
        want, major, want);
    return PLR_PROBE_WARN;
  }
  if (driver_cuda > 0 && driver_cuda / 1000 < major) {
    printf(
        "  problem: the driver supports CUDA %d.%d, older than this "
        "CUPTI (CUDA %d): GPU timing will fail\n"
        "  fix: update the NVIDIA driver to one for CUDA %d\n",
        driver_cuda / 1000, driver_cuda % 1000 / 10, major, major);
    return PLR_PROBE_WARN;
  }
  return PLR_PROBE_OK;
}

/* ---- limits and clock ---------------------------------------------------- */

static void plr_size(char *buf, size_t len, double bytes) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024 && i < 4) bytes /= 1024, i++;
  snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", bytes, u[i]);
}

static void plr_doctor_memlock(plr_doctor *d) {
  struct rlimit rl;
  double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  char r[32], b[32], l[32];
  plr_size(r, sizeof r, ram);
  plr_size(b, sizeof b, ram / 4);
  const char *env = getenv("PAGELOCK_REGISTER_BUDGET");
  int have = getrlimit(RLIMIT_MEMLOCK, &rl) == 0;
  if (!have || rl.rlim_cur == RLIM_INFINITY) {
    printf(
        "memlock:   RLIMIT_MEMLOCK unlimited; register budget %s%s%s "
        "(register, auto)\n",
        env && env[0] ? "PAGELOCK_REGISTER_BUDGET=" : "", env && env[0] ? env : b,
        env && env[0] ? "" : " (a quarter of RAM)");
    return;
  }
  plr_size(l, sizeof l, (double)rl.rlim_cur);
  double lim = (double)rl.rlim_cur;
  /* root (CAP_IPC_LOCK) is not held to the limit. */
  int bound = lim < ram / 4 && geteuid() != 0;
  printf("memlock:   RLIMIT_MEMLOCK %s%s; register budget %s%s\n", l,
         geteuid() == 0 ? " (root: not bound by it)" : "",
         env && env[0] ? "PAGELOCK_REGISTER_BUDGET=" : "", env && env[0] ? env : (bound ? l : b));
  if (bound && !(env && env[0])) {
    char what[256];
    snprintf(what, sizeof what,
             "--mode register/auto can page-lock only %s here, not the "
             "default budget of %s (a quarter of %s RAM); the rest is staged",
             l, b, r);
    plr_problem(d, 0, what,
                "raise it (`ulimit -l unlimited`, or memlock in "
                "/etc/security/limits.conf)");
  }
}

static void plr_doctor_clock(void) {
  char cs[64] = "unknown";
  FILE *f = fopen(
      "/sys/devices/system/clocksource/clocksource0/"
      "current_clocksource",
      "r");
  if (f) {
    if (fgets(cs, sizeof cs, f)) cs[strcspn(cs, "\n")] = 0;
    fclose(f);
  }
  printf("clock:     %s (%s)\n", cs,
         strcmp(cs, "tsc") == 0 ? "copies are timed from the TSC when it is the cheaper read"
                                : "copies are timed with clock_gettime: not the TSC, so each "
                                  "read costs more");
}

/* ---- the program ---------------------------------------------------------- */

/* Resolves name as execvp would; 0 with the path in out. */
static int plr_which(const char *name, char *out, size_t len) {
  struct stat st;
  if (strchr(name, '/')) {
    snprintf(out, len, "%s", name);
    return stat(out, &st) == 0 ? 0 : -1;
  }
  const char *path = getenv("PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path;;) {
    const char *e = strchr(p, ':');
    size_t dl = e ? (size_t)(e - p) : strlen(p);
    snprintf(out, len, "%.*s/%s", (int)(dl ? dl : 1), dl ? p : ".", name);
    if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode) && access(out, X_OK) == 0) return 0;
    if (!e) break;
    p = e + 1;
  }
  return -1;
}

static int plr_has_bytes(const unsigned char *m, size_t n, const char *s) {
  return memmem(m, n, s, strlen(s)) != NULL;
}

/* 1 when the section table holds a defined symbol called name. */
static int plr_defines(const unsigned char *m, size_t n, const Elf64_Ehdr *eh, const char *name) {
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(m + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB && sh[i].sh_type != SHT_DYNSYM) continue;
    if (sh[i].sh_link >= eh->e_shnum) continue;
    const Elf64_Shdr *st = &sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > n || st->sh_offset + st->sh_size > n) continue;
    const Elf64_Sym *sym = (const Elf64_Sym *)(m + sh[i].sh_offset);
    size_t cnt = sh[i].sh_size / sizeof *sym;
    for (size_t k = 0; k < cnt; k++) {
      if (sym[k].st_shndx == SHN_UNDEF || sym[k].st_name >= st->sh_size) continue;
      const char *s = (const char *)m + st->sh_offset + sym[k].st_name;
      if (strnlen(s, st->sh_size - sym[k].st_name) < st->sh_size - sym[k].st_name &&
          strcmp(s, name) == 0)
        return 1;
    }
  }
  return 0;
}

static void plr_doctor_program(plr_doctor *d, const char *name) {
  char path[PATH_MAX];
  if (plr_which(name, path, sizeof path) != 0) {
    printf("program:   %s\n", name);
    plr_problem(d, 1, "no such program (or not executable, searched in PATH)", "give its path");
    return;
  }
  printf("program:   %s\n", path);
  struct stat st;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &st) != 0) {
    plr_problem(d, 1, strerror(errno), "make it readable");
    if (fd >= 0) close(fd);
    return;
  }
  if (st.st_mode & (S_ISUID | S_ISGID))
    plr_problem(d, 1,
                "it is setuid or setgid: the loader ignores LD_PRELOAD for it, "
                "so the shim never loads",
                "run a copy without the setuid/setgid bit");
  size_t n = (size_t)st.st_size;
  const unsigned char *m = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  close(fd);
  if (m == MAP_FAILED) {
    plr_problem(d, 1, "cannot read it", "check the file");
    return;
  }
  if (n > 2 && m[0] == '#' && m[1] == '!') {
    size_t e = 2;
    while (e < n && e < 200 && m[e] != '\n') e++;
    printf(
        "           a script (%.*s): the shim reaches the programs it "
        "starts; their CUDA comes from what they load\n",
        (int)(e - 2), (const char *)m + 2);
    munmap((void *)m, n);
    return;
  }
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
  if (n < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
      eh->e_ident[EI_CLASS] != ELFCLASS64 ||
      eh->e_phoff + (size_t)eh->e_phnum * sizeof(Elf64_Phdr) > n ||
      eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > n) {
    plr_problem(d, 1, "not a 64-bit ELF program", "give the program itself");
    munmap((void *)m, n);
    return;
  }
  const Elf64_Phdr *ph = (const Elf64_Phdr *)(m + eh->e_phoff);
  int interp = 0;
  for (int i = 0; i < eh->e_phnum; i++)
    if (ph[i].p_type == PT_INTERP) interp = 1;
  if (!interp)
    plr_problem(d, 1,
                "it is statically linked: no dynamic loader, so LD_PRELOAD "
                "cannot reach it",
                "link it dynamically (the CUDA runtime may stay static: "
                "nvcc's default)");
  /* DT_NEEDED, through the section table (.dynamic and its strings). */
  char needed_cudart[128] = "", needed_cuda[128] = "";
  const Elf64_Shdr *sh = (const Elf64_Shdr *)(m + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    if (sh[i].sh_type != SHT_DYNAMIC || sh[i].sh_link >= eh->e_shnum) continue;
    const Elf64_Shdr *str = &sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > n || str->sh_offset + str->sh_size > n) continue;
    const Elf64_Dyn *dyn = (const Elf64_Dyn *)(m + sh[i].sh_offset);
    for (size_t k = 0; k < sh[i].sh_size / sizeof *dyn; k++) {
      if (dyn[k].d_tag != DT_NEEDED || dyn[k].d_un.d_val >= str->sh_size) continue;
      const char *s = (const char *)m + str->sh_offset + dyn[k].d_un.d_val;
      if (strncmp(s, "libcudart.so", 12) == 0)
        snprintf(needed_cudart, sizeof needed_cudart, "%s", s);
      if (strncmp(s, "libcuda.so", 10) == 0) snprintf(needed_cuda, sizeof needed_cuda, "%s", s);
    }
  }
  /* The static runtime leaves its functions in the symbol table and, even
   * stripped, its "libcudart_static_<hash>" tags in the data. */
  int static_cudart = !needed_cudart[0] && (plr_defines(m, n, eh, "cudaMemcpyAsync") ||
                                            plr_has_bytes(m, n, "libcudart_static_"));
  if (needed_cudart[0])
    printf("           cudart: shared (%s)\n", needed_cudart);
  else if (static_cudart)
    printf(
        "           cudart: static (linked in; the shim reaches it "
        "through dlsym and cuGetProcAddress)\n");
  else
    printf("           cudart: none linked\n");
  if (needed_cuda[0])
    printf("           libcuda: linked (%s)\n", needed_cuda);
  else if (needed_cudart[0] || static_cudart || plr_has_bytes(m, n, "libcuda.so.1"))
    printf("           libcuda: loaded at run time (dlopen libcuda.so.1)\n");
  else
    printf(
        "           libcuda: no sign of it: its CUDA must come from a "
        "library it loads (Python modules do)\n");
  munmap((void *)m, n);
}

/* ---- the command ------------------------------------------------------------- */

int plr_cmd_doctor(int argc, char **argv) {
  plr_opts op;
  plr_opts_init(&op, "doctor", PLR_ORDER_PERMUTE, argc, argv);
  int k;
  while ((k = plr_opts_next(&op)) == PLR_OPT_OPTION) {}
  if (k == PLR_OPT_HELP) return 0;
  if (k == PLR_OPT_ERROR) return PLR_EXIT_USAGE;
  if (argc - optind > 1) {
    char shown[160];
    plr_escape_ctl(argv[optind + 1], shown, sizeof shown);
    return plr_usage_error("doctor", "unexpected argument '%s' (one PROGRAM at most)", shown);
  }
  const char *program = optind < argc ? argv[optind] : NULL;
  plr_doctor d = {0, 0};
  printf("pagelock:  %s (trace format %u)\n", PLR_VERSION, PAGELOCK_TRACE_VERSION);

  char shim[PATH_MAX + 32];
  const char *env_shim = getenv("PAGELOCK_SHIM");
  int shim_ok = env_shim && env_shim[0]
                    ? (snprintf(shim, sizeof shim, "%s", env_shim), access(shim, R_OK) == 0)
                    : plr_pkg_path("libpagelock.so", shim, sizeof shim) == 0;
  printf("shim:      %s%s\n", shim[0] ? shim : "libpagelock.so", shim_ok ? "" : " (missing)");
  if (!shim_ok)
    plr_problem(&d, 1, "the shim is not where pagelock looks for it",
                "reinstall pagelock, or set PAGELOCK_SHIM to libpagelock.so");

  int driver_cuda = 0;
  /* The probe's driver version comes back through a shared page. */
  int *shared = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int rc = plr_probe(plr_probe_gpu, shared != MAP_FAILED ? shared : &driver_cuda);
  if (shared != MAP_FAILED) {
    driver_cuda = *shared;
    munmap(shared, sizeof(int));
  }
  if (rc != PLR_PROBE_OK) d.problems++;
  if (rc == PLR_PROBE_BLOCK) d.blocking++;

  const char *cupti = getenv("PAGELOCK_CUPTI");
  if (cupti && (strcmp(cupti, "0") == 0 || strcasecmp(cupti, "off") == 0 ||
                strcasecmp(cupti, "no") == 0 || strcasecmp(cupti, "false") == 0)) {
    printf("CUPTI:     off (PAGELOCK_CUPTI=%s): no GPU timing\n", cupti);
  } else {
    rc = plr_probe(plr_probe_cupti, &driver_cuda);
    if (rc != PLR_PROBE_OK) d.problems++;
  }

  const char *inj = getenv("CUDA_INJECTION64_PATH");
  const char *base = inj ? strrchr(inj, '/') : NULL;
  base = base ? base + 1 : inj;
  if (!inj || !inj[0]) {
    printf(
        "injection: CUDA_INJECTION64_PATH not set (pagelock run sets it "
        "to the shim)\n");
  } else if (strcmp(base, "libpagelock.so") == 0) {
    printf("injection: CUDA_INJECTION64_PATH=%s (pagelock)\n", inj);
  } else {
    printf("injection: CUDA_INJECTION64_PATH=%s\n", inj);
    plr_problem(&d, 0,
                "another CUPTI client is configured (nsys, ncu or a "
                "profiler): it takes CUPTI first, so pagelock records copies "
                "without GPU timing",
                "unset CUDA_INJECTION64_PATH for the pagelock run");
  }
  plr_doctor_memlock(&d);
  plr_doctor_clock();
  if (program) plr_doctor_program(&d, program);

  if (!d.problems)
    printf("doctor:    no problems\n");
  else
    printf("doctor:    %d problem%s, %d of them blocking recording\n", d.problems,
           d.problems == 1 ? "" : "s", d.blocking);
  return d.blocking ? 1 : 0;
}
