/* fd_close.c - a program that closes or takes over every descriptor, as
 * daemons and servers do, between two runs of copies.
 *
 * usage: fd_close MODE DATA [COPIES]
 *   MODE: close_range  close_range(3, ~0U, 0)
 *         closefrom    closefrom(3)
 *         loop         close(fd) for every fd from 3 below _SC_OPEN_MAX
 *         dup2         dup2(its data file, the trace's descriptor)
 *         raw          the close_range system call itself (no libc, so no
 *                      wrapper sees it), then the dup3 system call puts the
 *                      data file at the trace's old number
 *         fork_exec    a child closes everything from 3 and execs this
 *                      program as `fd_close child DATA.child`; the parent
 *                      goes on copying and writes DATA itself
 *         child        (the exec'd child) copies, then writes DATA
 * After the closing it opens DATA, writes exactly 40 bytes to it and makes
 * COPIES more copies, leaving DATA open at exit, when the shim writes the
 * rest of its trace.  DATA must then hold the 40 bytes and nothing else.
 * Prints copies=N, the copies this process made. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

static const char data40[] = "the program's own 40 bytes, nothing else";
static int copies;

static void copy_some(int n) {
  static void *dev;
  static char host[4096];
  if (dev == NULL && cudaMalloc(&dev, sizeof host) != cudaSuccess) {
    fprintf(stderr, "fd_close: cudaMalloc failed\n");
    exit(1);
  }
  for (int i = 0; i < n; i++) {
    if (cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) {
      fprintf(stderr, "fd_close: copy failed\n");
      exit(1);
    }
    copies++;
  }
}

/* The descriptor whose file ends in ".trace": the shim's. */
static int trace_fd(void) {
  DIR *d = opendir("/proc/self/fd");
  int found = -1;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    char link[300], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 6) continue;
    target[n] = 0;
    if (strcmp(target + n - 6, ".trace") == 0) found = atoi(e->d_name);
  }
  if (d) closedir(d);
  if (found < 0) {
    fprintf(stderr, "fd_close: no trace descriptor (is the shim preloaded?)\n");
    exit(1);
  }
  return found;
}

/* Where the closing starts.  Over a real driver (FD_CLOSE_KEEP_DRIVER=1,
 * which run.sh sets on the GPU host) the driver's own descriptors are
 * kept: device nodes, pipes, sockets, eventfds, anything that is not a
 * regular file or a directory.  A daemon closes its descriptors before it
 * starts CUDA, and a driver whose descriptors vanish fails every later
 * call, which says nothing about pagelock.  The shim's trace is a regular
 * file at number 768 or above, over the driver's, so it is still closed. */
static int first_fd(void) {
  if (getenv("FD_CLOSE_KEEP_DRIVER") == NULL) return 3;
  int first = 3;
  DIR *d = opendir("/proc/self/fd");
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    int fd = atoi(e->d_name);
    struct stat st;
    if (fd < 3 || fd == dirfd(d) || fstat(fd, &st) != 0) continue;
    if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && fd >= first) first = fd + 1;
  }
  if (d) closedir(d);
  return first;
}

static int open_data(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    fprintf(stderr, "fd_close: cannot create %s: %s\n", path, strerror(errno));
    exit(1);
  }
  return fd;
}

static void write_data(int fd) {
  if (write(fd, data40, 40) != 40) {
    fprintf(stderr, "fd_close: cannot write the data file: %s\n", strerror(errno));
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: fd_close MODE DATA [COPIES]\n");
    return 2;
  }
  const char *mode = argv[1], *data = argv[2];
  int n = argc > 3 ? atoi(argv[3]) : 20;
  copy_some(n); /* the trace file is open from the first copy on */
  int dfd = -1, from = first_fd();
  if (!strcmp(mode, "close_range")) {
    if (close_range((unsigned)from, ~0u, 0) != 0) {
      perror("fd_close: close_range");
      return 1;
    }
  } else if (!strcmp(mode, "closefrom")) {
    closefrom(from);
  } else if (!strcmp(mode, "loop")) {
    long max = sysconf(_SC_OPEN_MAX);
    for (long fd = from; fd < max; fd++) {
      int r = close((int)fd);
      if (r != 0 && errno != EBADF) {
        perror("fd_close: close");
        return 1;
      }
    }
  } else if (!strcmp(mode, "dup2")) {
    int t = trace_fd();
    int fd = open_data(data);
    if (dup2(fd, t) != t) {
      perror("fd_close: dup2");
      return 1;
    }
    close(fd);
    dfd = t;
  } else if (!strcmp(mode, "raw")) {
    int t = trace_fd();
    if (syscall(SYS_close_range, from, ~0u, 0) != 0) {
      perror("fd_close: SYS_close_range");
      return 1;
    }
    dfd = open_data(data); /* (the lowest number: the trace's, without a high one) */
    if (dfd != t && syscall(SYS_dup3, dfd, t, 0) != t) {
      perror("fd_close: SYS_dup3");
      return 1;
    }
  } else if (!strcmp(mode, "fork_exec")) {
    pid_t pid = fork();
    if (pid == 0) {
      close_range(3, ~0u, 0);
      char child[PATH_MAX];
      snprintf(child, sizeof child, "%s.child", data);
      execl("/proc/self/exe", argv[0], "child", child, argv[3], (char *)NULL);
      _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "fd_close: the child failed\n");
      return 1;
    }
  } else if (strcmp(mode, "child") != 0) {
    fprintf(stderr, "fd_close: unknown mode %s\n", mode);
    return 2;
  }
  if (dfd < 0) dfd = open_data(data);
  write_data(dfd);
  copy_some(n);
  printf("copies=%d\n", copies);
  return 0; /* DATA stays open: the shim writes the rest of its trace now */
}
