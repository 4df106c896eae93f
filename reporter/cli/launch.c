/* launch.c - run a program under the shim, forward signals, collect the
 * manifest of trace files. */
#define _GNU_SOURCE
#include "launch.h"
#include "pkgdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <uthash.h>

#include "escape.h"
#include "exit_status.h"
#include "names.h"
#include "pagelock/trace_format.h"

#define PLR_SHIM_NAME "libpagelock.so"
#define PLR_DEFAULT_PATTERN "pagelock.%p.trace"

const char *plr_mode_canonical(const char *mode) {
  for (uint32_t m = PAGELOCK_MODE_OBSERVE; m <= PAGELOCK_MODE_OFF; m++)
    if (strcasecmp(mode, plr_mode_name(m)) == 0) return plr_mode_name(m);
  return NULL;
}

int plr_mode_error(const char *source, const char *mode) {
  char shown[128];
  plr_escape_ctl(mode, shown, sizeof shown);
  fprintf(stderr,
          "pagelock: invalid %s='%s' in the environment (valid: "
          "observe, stage, register, auto, off; --mode overrides it)\n",
          source, shown);
  return PLR_EXIT_USAGE;
}

/* The name of the first control character in s, or NULL when it has
 * none. */
static const char *plr_ctl_name(const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\n') return "a newline";
    if (c == '\r') return "a carriage return";
    if (c == '\t') return "a tab";
    if (c < 0x20 || c == 0x7f) return "a control character";
  }
  return NULL;
}

void plr_escape_ctl(const char *s, char *buf, size_t len) {
  size_t o = 0;
  if (!len) return;
  for (; *s && o + 5 < len; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\n')
      o += (size_t)snprintf(buf + o, len - o, "\\n");
    else if (c == '\r')
      o += (size_t)snprintf(buf + o, len - o, "\\r");
    else if (c == '\t')
      o += (size_t)snprintf(buf + o, len - o, "\\t");
    else if (c < 0x20 || c == 0x7f)
      o += (size_t)snprintf(buf + o, len - o, "\\x%02x", c);
    else
      buf[o++] = (char)c;
  }
  buf[o] = 0;
}

/* Resolves name like execvp would.  Returns 0 with the path in out, or
 * ENOENT / EACCES (found only files that are not executable). */
static int plr_find_program(const char *name, char *out, size_t len) {
  struct stat st;
  if (strchr(name, '/')) {
    if (stat(name, &st) != 0) return ENOENT;
    if (S_ISDIR(st.st_mode) || access(name, X_OK) != 0) return EACCES;
    snprintf(out, len, "%s", name);
    return 0;
  }
  if (!name[0]) return ENOENT;
  const char *path = getenv("PATH");
  if (!path) path = "/usr/local/bin:/usr/bin:/bin";
  int seen_noexec = 0;
  for (const char *p = path;;) {
    const char *e = strchr(p, ':');
    size_t dl = e ? (size_t)(e - p) : strlen(p);
    char cand[PATH_MAX];
    int k = dl ? snprintf(cand, sizeof cand, "%.*s/%s", (int)dl, p, name)
               : snprintf(cand, sizeof cand, "%s", name);
    if (k > 0 && (size_t)k < sizeof cand && stat(cand, &st) == 0 && !S_ISDIR(st.st_mode)) {
      if (access(cand, X_OK) == 0) {
        snprintf(out, len, "%s", cand);
        return 0;
      }
      seen_noexec = 1;
    }
    if (!e) break;
    p = e + 1;
  }
  return seen_noexec ? EACCES : ENOENT;
}

/* ENOSPC when the filesystem holding dir has no block (or, where it counts
 * them, no inode) left for a trace, else 0.  The shim would create the file
 * and fail on its first write, and the run would end with no report.  A
 * filesystem that reports no sizes (f_blocks 0: some FUSE and network
 * ones) is not judged.  Root may use the blocks reserved for it. */
static int plr_dir_full(const char *dir) {
  struct statvfs v;
  if (statvfs(dir, &v) != 0 || v.f_blocks == 0) return 0;
  int root = geteuid() == 0;
  if ((root ? v.f_bfree : v.f_bavail) == 0) return ENOSPC;
  if (v.f_files && (root ? v.f_ffree : v.f_favail) == 0) return ENOSPC;
  return 0;
}

/* Turns the trace pattern (-o, or PAGELOCK_OUTPUT: source names which)
 * into an absolute one (so a child that chdirs still writes where the user
 * meant) and checks its directory is writable and not full.  A pattern
 * naming a directory gets the default file name appended.  A path with a
 * control character is refused: the manifest lists one path per line, so a
 * newline would split the path and lose the trace.  Returns 0, or prints
 * the problem and returns PLR_EXIT_USAGE. */
static int plr_prepare_output(const char *source, const char *pattern, char *out, size_t len) {
  const char *ctl = pattern ? plr_ctl_name(pattern) : NULL;
  if (ctl) {
    char shown[PATH_MAX];
    plr_escape_ctl(pattern, shown, sizeof shown);
    fprintf(stderr,
            "pagelock: invalid %s '%s': a trace path cannot hold "
            "control characters (this one has %s)\n",
            source, shown, ctl);
    return PLR_EXIT_USAGE;
  }
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, ".");
  struct stat st;
  size_t pl = pattern ? strlen(pattern) : 0;
  int is_dir =
      pattern && pl && (pattern[pl - 1] == '/' || (stat(pattern, &st) == 0 && S_ISDIR(st.st_mode)));
  char full[PATH_MAX * 2];
  if (!pattern)
    snprintf(full, sizeof full, "%s/%s", cwd, PLR_DEFAULT_PATTERN);
  else if (pattern[0] == '/')
    snprintf(full, sizeof full, "%s%s%s", pattern, is_dir && pattern[pl - 1] != '/' ? "/" : "",
             is_dir ? PLR_DEFAULT_PATTERN : "");
  else
    snprintf(full, sizeof full, "%s/%s%s%s", cwd, pattern,
             is_dir && pattern[pl - 1] != '/' ? "/" : "", is_dir ? PLR_DEFAULT_PATTERN : "");
  if ((size_t)snprintf(out, len, "%s", full) >= len) {
    fprintf(stderr, "pagelock: output pattern '%s' is too long\n", pattern);
    return PLR_EXIT_USAGE;
  }
  /* The directory as the user wrote it, for the message. */
  char shown[PATH_MAX * 2];
  if (!pattern)
    snprintf(shown, sizeof shown, "%s/", cwd);
  else if (is_dir)
    snprintf(shown, sizeof shown, "%s%s", pattern, pattern[pl - 1] == '/' ? "" : "/");
  else if (strrchr(pattern, '/'))
    snprintf(shown, sizeof shown, "%.*s/", (int)(strrchr(pattern, '/') - pattern), pattern);
  else
    snprintf(shown, sizeof shown, "%s/", cwd);

  /* The rest came from the current directory (or the demo's TMPDIR). */
  ctl = plr_ctl_name(full);
  if (ctl) {
    char esc[PATH_MAX];
    plr_escape_ctl(shown, esc, sizeof esc);
    fprintf(stderr,
            "pagelock: cannot write traces to '%s': a trace path "
            "cannot hold control characters (this one has %s); give -o a "
            "path without them\n",
            esc, ctl);
    return PLR_EXIT_USAGE;
  }

  char dir[PATH_MAX * 2];
  snprintf(dir, sizeof dir, "%s", full);
  *strrchr(dir, '/') = 0;
  if (!dir[0]) snprintf(dir, sizeof dir, "/");
  /* Placeholders in the directory part are expanded per process by the
   * shim; there is nothing to check until then. */
  if (strchr(dir, '%')) return 0;
  int err = 0;
  if (stat(dir, &st) != 0)
    err = errno;
  else if (!S_ISDIR(st.st_mode))
    err = ENOTDIR;
  else if (access(dir, W_OK | X_OK) != 0)
    err = errno;
  else
    err = plr_dir_full(dir);
  if (err) {
    fprintf(stderr, "pagelock: cannot write traces to '%s': %s\n", shown, strerror(err));
    return PLR_EXIT_USAGE;
  }
  return 0;
}

/* An output (the absolute pattern from plr_prepare_output) that names
 * something already there which is no place for trace files.  A character
 * device (/dev/null, /dev/full, a terminal, /dev/stdout when it is one)
 * means "keep no trace": returns 1, and the run writes its traces to a
 * private directory, reports them and deletes them, so `-o /dev/null`
 * still gives the report (the shim alone writes nothing then: it cannot
 * report).  A FIFO, socket or block device, or a link into /proc
 * (/dev/stdout, /dev/stderr: the program's own descriptors) is refused
 * before the program runs: one line, PLR_EXIT_USAGE.  0 otherwise; a
 * pattern with placeholders is the shim's to judge per process. */
static int plr_output_special(const char *source, const char *given, const char *pattern) {
  struct stat lst, st;
  if (strchr(pattern, '%') || lstat(pattern, &lst) != 0 || S_ISREG(lst.st_mode)) return 0;
  int link = S_ISLNK(lst.st_mode);
  if (!link)
    st = lst;
  else if (stat(pattern, &st) != 0)
    return 0;
  if (S_ISCHR(st.st_mode)) return 1;
  const char *what = S_ISFIFO(st.st_mode)   ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                                            : NULL;
  char t[8];
  ssize_t n = link ? readlink(pattern, t, sizeof t) : -1;
  if (n >= 6 && memcmp(t, "/proc/", 6) == 0) what = "one of the program's own descriptors";
  if (!what) return 0;
  char shown[PATH_MAX];
  plr_escape_ctl(given, shown, sizeof shown);
  fprintf(
      stderr,
      "pagelock: cannot write traces to %s '%s': it is %s, and a trace is a regular file of its "
      "own (give a file name or a directory, or /dev/null to keep none)\n",
      source, shown, what);
  return PLR_EXIT_USAGE;
}

/* The private directory of a discarded output, and the pattern in it. */
static int plr_discard_dir(plr_launch_result *res, const char *given, char *pattern, size_t len) {
  const char *tmpdir = getenv("TMPDIR");
  if (!tmpdir || !tmpdir[0]) tmpdir = "/tmp";
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/pagelock-discard.XXXXXX", tmpdir);
  if (!mkdtemp(dir)) {
    fprintf(stderr, "pagelock: cannot create a directory for the report in '%s': %s\n", tmpdir,
            strerror(errno));
    return PLR_EXIT_USAGE;
  }
  res->discard_dir = strdup(dir);
  res->discard_name = strdup(given);
  if (!res->discard_dir || !res->discard_name ||
      (size_t)snprintf(pattern, len, "%s/%s", dir, PLR_DEFAULT_PATTERN) >= len) {
    rmdir(dir);
    fprintf(stderr, "pagelock: out of memory\n");
    return PLR_EXIT_USAGE;
  }
  return 0;
}

/* Finds the shim: PAGELOCK_SHIM, else libpagelock.so beside pagelock (a
 * build tree) or in the installed tree's library directory (pkgdir.h).
 * Returns 0 with an absolute path in out, or prints why and returns
 * PLR_EXIT_USAGE. */
static int plr_find_shim(char *out, size_t len) {
  char cand[PATH_MAX + 32];
  const char *env = getenv("PAGELOCK_SHIM");
  if (env && env[0]) {
    snprintf(cand, sizeof cand, "%s", env);
  } else if (plr_pkg_path(PLR_SHIM_NAME, cand, sizeof cand) != 0 && !cand[0]) {
    fprintf(stderr,
            "pagelock: cannot find my own executable to locate "
            "%s: set PAGELOCK_SHIM\n",
            PLR_SHIM_NAME);
    return PLR_EXIT_USAGE;
  }
  char real[PATH_MAX];
  if (access(cand, R_OK) != 0 || !realpath(cand, real)) {
    fprintf(stderr,
            "pagelock: cannot use the shim '%s': %s (set "
            "PAGELOCK_SHIM to the path of %s)\n",
            cand, strerror(errno), PLR_SHIM_NAME);
    return PLR_EXIT_USAGE;
  }
  if ((size_t)snprintf(out, len, "%s", real) >= len) return PLR_EXIT_USAGE;
  return 0;
}

/* 1 when the LD_PRELOAD entry of k bytes at p is the shim: the same file,
 * or any libpagelock.so (two shims in one process would both interpose). */
static int plr_is_shim(const char *p, size_t k, const struct stat *shim_st) {
  char entry[PATH_MAX];
  if (k >= sizeof entry) return 0;
  memcpy(entry, p, k);
  entry[k] = 0;
  const char *base = strrchr(entry, '/');
  if (strcmp(base ? base + 1 : entry, PLR_SHIM_NAME) == 0) return 1;
  struct stat st;
  return shim_st && stat(entry, &st) == 0 && st.st_dev == shim_st->st_dev &&
         st.st_ino == shim_st->st_ino;
}

/* Sets LD_PRELOAD to the shim followed by the user's other entries, in
 * their order.  The shim must come first: the loader binds malloc and
 * free to the first preloaded library that defines them, so after an
 * allocator (LD_PRELOAD=libjemalloc.so.2) the shim would never see the
 * program's allocations.  ld.so separates entries by ':' or ' '. */
static int plr_set_preload(const char *shim) {
  const char *old = getenv("LD_PRELOAD");
  if (!old) old = "";
  size_t cap = strlen(shim) + strlen(old) + 2;
  char *v = malloc(cap);
  if (!v) return -1;
  struct stat shim_st;
  int have = stat(shim, &shim_st) == 0;
  size_t n = (size_t)snprintf(v, cap, "%s", shim);
  for (const char *p = old; *p;) {
    size_t k = strcspn(p, ": ");
    if (k && !plr_is_shim(p, k, have ? &shim_st : NULL)) {
      v[n++] = ':';
      memcpy(v + n, p, k);
      n += k;
      v[n] = 0;
    }
    p += k;
    if (*p) p++;
  }
  int rc = setenv("LD_PRELOAD", v, 1);
  free(v);
  return rc;
}

/* setenv(name, first + ":" + old) or just first when old is empty; dedup
 * is the caller's business. */
static int plr_prepend_env(const char *name, const char *first) {
  const char *old = getenv(name);
  if (!old || !old[0]) return setenv(name, first, 1);
  size_t n = strlen(first) + strlen(old) + 2;
  char *v = malloc(n);
  if (!v) return -1;
  snprintf(v, n, "%s:%s", first, old);
  int rc = setenv(name, v, 1);
  free(v);
  return rc;
}

/* The signals pagelock handles itself while the program runs. */
static const int plr_sigs[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
#define PLR_NSIGS (sizeof plr_sigs / sizeof plr_sigs[0])

typedef struct plr_saved_signals {
  struct sigaction old[PLR_NSIGS];
} plr_saved_signals;

/* Child side between fork and exec: environment, signal dispositions,
 * then exec.  Runs in a fresh single-threaded child, so setenv is safe.
 * Reports exec's errno through errfd and never returns. */
static void plr_child_exec(const plr_launch *l, const char *prog, const char *shim,
                           const char *pattern, const char *manifest, int errfd,
                           const plr_saved_signals *saved) {
  /* The program gets the dispositions pagelock was started with (nohup's
   * ignored SIGHUP included), not the ones pagelock uses while waiting. */
  for (size_t i = 0; i < PLR_NSIGS; i++) sigaction(plr_sigs[i], &saved->old[i], NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);

  int rc = 0;
  rc |= setenv("PAGELOCK_MODE", l->mode, 1);
  if (pattern) rc |= setenv("PAGELOCK_OUTPUT", pattern, 1);
  rc |= setenv("PAGELOCK_MANIFEST", manifest, 1);
  rc |= plr_set_preload(shim);
  rc |= setenv("CUDA_INJECTION64_PATH", shim, 0);
  if (l->ld_prepend) rc |= plr_prepend_env("LD_LIBRARY_PATH", l->ld_prepend);
  if (l->omp_short) rc |= setenv("GOMP_SPINCOUNT", PLR_OMP_SPINCOUNT, 0);
  int err = ENOMEM;
  if (rc == 0) {
    execv(prog, l->argv);
    err = errno;
    if (err == ENOEXEC) {
      /* A script without "#!": run it with sh, as execvp and shells do. */
      size_t n = 0;
      while (l->argv[n]) n++;
      char **av = calloc(n + 2, sizeof *av);
      if (av) {
        av[0] = "sh";
        av[1] = (char *)prog;
        for (size_t i = 1; i < n; i++) av[i + 1] = l->argv[i];
        execv("/bin/sh", av);
      }
      err = ENOEXEC;
    }
  }
  ssize_t w = write(errfd, &err, sizeof err);
  (void)w;
  _exit(PLR_EXIT_NOT_FOUND);
}

static volatile sig_atomic_t plr_child_pid;
static volatile sig_atomic_t plr_pending_sig;

/* SIGTERM/SIGHUP: hand to the child, which decides; we exit with it. */
static void plr_forward(int sig) {
  pid_t pid = (pid_t)plr_child_pid;
  if (pid > 0)
    kill(pid, sig);
  else
    plr_pending_sig = sig;
}

typedef struct plr_seen {
  UT_hash_handle hh;
  char path[];
} plr_seen;

/* Reads the manifest the shim appended to: one absolute trace path per
 * line, in creation order; duplicates (a re-opened trace) dropped.  It
 * lies in a shared directory: opened without following a link nor waiting
 * on a FIFO, and read only when it is still a regular file. */
static int plr_read_manifest(const char *manifest, plr_launch_result *res) {
  int fd = open(manifest, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  FILE *f = NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !(f = fdopen(fd, "r"))) {
    close(fd);
    return -1;
  }
  plr_seen *seen = NULL, *s, *tmp;
  char *line = NULL;
  size_t cap = 0, alloc = 0;
  ssize_t n;
  int rc = 0;
  while ((n = getline(&line, &cap, f)) > 0) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    if (!n) continue;
    HASH_FIND_STR(seen, line, s);
    if (s) continue;
    s = malloc(sizeof *s + (size_t)n + 1);
    char *copy = strdup(line);
    if (res->ntraces == alloc) {
      alloc = alloc ? alloc * 2 : 8;
      char **v = realloc(res->traces, alloc * sizeof *v);
      if (v)
        res->traces = v;
      else
        alloc = res->ntraces;
    }
    if (!s || !copy || res->ntraces == alloc) {
      free(s);
      free(copy);
      rc = -1;
      break;
    }
    memcpy(s->path, line, (size_t)n + 1);
    HASH_ADD_STR(seen, path, s);
    res->traces[res->ntraces++] = copy;
  }
  free(line);
  fclose(f);
  HASH_ITER(hh, seen, s, tmp) {
    HASH_DEL(seen, s);
    free(s);
  }
  return rc;
}

int plr_launch_run(const plr_launch *l, plr_launch_result *res) {
  memset(res, 0, sizeof *res);
  char prog[PATH_MAX];
  int e = plr_find_program(l->argv[0], prog, sizeof prog);
  if (e) {
    fprintf(stderr, "pagelock: program '%s' %s\n", l->argv[0],
            e == EACCES ? "not executable" : "not found");
    return PLR_EXIT_NOT_FOUND;
  }
  /* Without -o the shim uses PAGELOCK_OUTPUT from the environment, or its
   * default in the program's directory: check that one, set nothing. */
  char pattern[PATH_MAX * 2];
  const char *env_out = getenv("PAGELOCK_OUTPUT");
  if (!l->output && env_out && !env_out[0]) env_out = NULL;
  const char *source = l->output ? "-o" : "PAGELOCK_OUTPUT";
  const char *given = l->output ? l->output : env_out;
  int rc = plr_prepare_output(source, given, pattern, sizeof pattern);
  if (rc) return rc;
  int discard = plr_output_special(source, given ? given : "", pattern);
  if (discard > 1) return discard;
  char shim[PATH_MAX];
  rc = plr_find_shim(shim, sizeof shim);
  if (rc) return rc;

  const char *tmpdir = getenv("TMPDIR");
  if (!tmpdir || !tmpdir[0]) tmpdir = "/tmp";
  char manifest[PATH_MAX];
  snprintf(manifest, sizeof manifest, "%s/pagelock-manifest.XXXXXX", tmpdir);
  int mfd = mkostemp(manifest, O_CLOEXEC);
  if (mfd < 0) {
    fprintf(stderr, "pagelock: cannot create a manifest file in '%s': %s\n", tmpdir,
            strerror(errno));
    return PLR_EXIT_USAGE;
  }
  close(mfd);

  int ep[2];
  if (pipe2(ep, O_CLOEXEC) != 0) {
    fprintf(stderr, "pagelock: pipe: %s\n", strerror(errno));
    unlink(manifest);
    return PLR_EXIT_USAGE;
  }
  /* Like time(1): the terminal's ^C and ^\ reach the child directly; we
   * stay alive to report on whatever it wrote. */
  struct sigaction ign, fwd;
  memset(&ign, 0, sizeof ign);
  memset(&fwd, 0, sizeof fwd);
  ign.sa_handler = SIG_IGN;
  fwd.sa_handler = plr_forward;
  sigemptyset(&ign.sa_mask);
  sigemptyset(&fwd.sa_mask);
  fwd.sa_flags = SA_RESTART;
  plr_child_pid = 0;
  plr_pending_sig = 0;
  plr_saved_signals saved;
  for (size_t i = 0; i < PLR_NSIGS; i++) {
    int sig = plr_sigs[i];
    sigaction(sig, sig == SIGINT || sig == SIGQUIT ? &ign : &fwd, &saved.old[i]);
  }

  if (discard && (rc = plr_discard_dir(res, given, pattern, sizeof pattern)) != 0) {
    for (size_t i = 0; i < PLR_NSIGS; i++) sigaction(plr_sigs[i], &saved.old[i], NULL);
    close(ep[0]);
    close(ep[1]);
    unlink(manifest);
    plr_launch_result_free(res);
    return rc;
  }
  fflush(NULL); /* the child inherits stdio buffers otherwise */
  pid_t pid = fork();
  if (pid == 0)
    plr_child_exec(l, prog, shim, l->output || discard ? pattern : NULL, manifest, ep[1], &saved);
  close(ep[1]);
  int status = 0, exec_err = 0;
  if (pid < 0) {
    exec_err = errno;
  } else {
    plr_child_pid = pid;
    if (plr_pending_sig) kill(pid, plr_pending_sig);
    while (read(ep[0], &exec_err, sizeof exec_err) < 0 && errno == EINTR) {}
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  }
  close(ep[0]);
  plr_child_pid = 0;
  for (size_t i = 0; i < PLR_NSIGS; i++) sigaction(plr_sigs[i], &saved.old[i], NULL);

  if (pid < 0 || exec_err) {
    fprintf(stderr, "pagelock: cannot run '%s': %s\n", l->argv[0], strerror(exec_err));
    unlink(manifest);
    plr_launch_result_free(res);
    return PLR_EXIT_NOT_FOUND;
  }
  if (WIFSIGNALED(status))
    res->status = 128 + WTERMSIG(status);
  else
    res->status = WEXITSTATUS(status);
  if (plr_read_manifest(manifest, res) != 0) {
    fprintf(stderr,
            "pagelock: cannot read the trace manifest '%s': the "
            "traces written, if any, are not reported\n",
            manifest);
    res->lost = 1;
  }
  unlink(manifest);
  return 0;
}

void plr_launch_result_free(plr_launch_result *res) {
  for (size_t i = 0; i < res->ntraces; i++) free(res->traces[i]);
  free(res->traces);
  res->traces = NULL;
  res->ntraces = 0;
  if (res->discard_dir) {
    /* Private (mkdtemp's 0700): whatever is in it is this run's traces. */
    DIR *d = opendir(res->discard_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
        unlinkat(dirfd(d), e->d_name, 0);
    if (d) closedir(d);
    rmdir(res->discard_dir);
  }
  free(res->discard_dir);
  free(res->discard_name);
  res->discard_dir = res->discard_name = NULL;
}

/* Prints the "trace written" lines, or the "no trace was written" line. */
static void plr_print_trace_list(FILE *out, char *const *paths, size_t n) {
  if (!n) {
    fprintf(out,
            "pagelock: no trace was written (the program made no CUDA "
            "copies, or the shim was not loaded: statically linked and "
            "setuid programs ignore LD_PRELOAD)\n");
    return;
  }
  /* A listed file that is gone was already reported as unreadable.  The
   * paths are the manifest's, any bytes the program's pattern produced:
   * escaped (escape.h). */
  for (size_t i = 0; i < n; i++)
    if (access(paths[i], F_OK) == 0) {
      fputs("pagelock: trace written to ", out);
      plr_text_puts(out, paths[i]);
      fputc('\n', out);
    }
}

void plr_launch_print_traces(FILE *out, const plr_launch_result *res) {
  if (!res->discard_dir || !res->ntraces) {
    plr_print_trace_list(out, res->traces, res->ntraces);
    return;
  }
  char shown[PATH_MAX];
  plr_escape_ctl(res->discard_name, shown, sizeof shown);
  fprintf(out,
          "pagelock: '%s' is a character device, which keeps nothing: the %zu trace%s above %s "
          "deleted after the report\n",
          shown, res->ntraces, res->ntraces == 1 ? "" : "s", res->ntraces == 1 ? "was" : "were");
}
