/*
 * An LD_PRELOAD shim that fails file writes, fsyncs, allocations and renames on demand, so that
 * tests can put real EIO and ENOSPC under a real process (the `quiver` binary, or a test binary
 * that re-runs itself) and take them away again while it runs.
 *
 * Inert unless QUIVER_IO_FAULTS names a control file. While that file exists, each line of it
 * is a rule `<errno> <ops> <path-prefix>`, for example `EIO fsync,write /tmp/x/store`:
 * - errno: EIO, ENOSPC, EDQUOT or a number;
 * - ops, comma-separated: `write` (write, pwrite, pwritev and friends), `fsync` (fsync,
 *   fdatasync), `allocate` (fallocate, posix_fallocate), `rename` (rename, renameat, renameat2),
 *   or `all`;
 * - a call fails when the file it writes (found through /proc/self/fd) or the path it renames
 *   lies at or under the prefix. The first matching rule wins.
 * A failed call does nothing and returns -1 with errno set, as the kernel does when it refuses
 * a write. The control file is read on every call, so a test turns faults on and off by
 * writing and removing it; without it a call costs one failed open() more.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum op { OP_WRITE = 1, OP_FSYNC = 2, OP_ALLOCATE = 4, OP_RENAME = 8 };

static int parse_errno(const char *word) {
    if (strcmp(word, "EIO") == 0) return EIO;
    if (strcmp(word, "ENOSPC") == 0) return ENOSPC;
    if (strcmp(word, "EDQUOT") == 0) return EDQUOT;
    return atoi(word);
}

static int parse_ops(char *word) {
    int ops = 0;
    for (char *save = NULL, *op = strtok_r(word, ",", &save); op; op = strtok_r(NULL, ",", &save)) {
        if (strcmp(op, "write") == 0) ops |= OP_WRITE;
        else if (strcmp(op, "fsync") == 0) ops |= OP_FSYNC;
        else if (strcmp(op, "allocate") == 0) ops |= OP_ALLOCATE;
        else if (strcmp(op, "rename") == 0) ops |= OP_RENAME;
        else if (strcmp(op, "all") == 0) ops |= OP_WRITE | OP_FSYNC | OP_ALLOCATE | OP_RENAME;
    }
    return ops;
}

/* Whether `path` is `prefix` or lies under it. */
static int under(const char *path, const char *prefix) {
    size_t n = strlen(prefix);
    while (n > 1 && prefix[n - 1] == '/') n--;
    return strncmp(path, prefix, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

/* The errno to fail `op` on `path` with, or 0 to let the call through. */
static int fault_for(int op, const char *path) {
    const char *control = getenv("QUIVER_IO_FAULTS");
    if (control == NULL || path == NULL) return 0;
    int fd = open(control, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char rules[4096];
    ssize_t length = read(fd, rules, sizeof rules - 1);
    close(fd);
    if (length <= 0) return 0;
    rules[length] = '\0';
    for (char *save = NULL, *line = strtok_r(rules, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *words = NULL;
        char *error = strtok_r(line, " \t", &words);
        char *ops = strtok_r(NULL, " \t", &words);
        char *prefix = strtok_r(NULL, " \t", &words);
        if (error && ops && prefix && (parse_ops(ops) & op) && under(path, prefix)) {
            return parse_errno(error);
        }
    }
    return 0;
}

static int fault_for_fd(int op, int fd) {
    if (getenv("QUIVER_IO_FAULTS") == NULL) return 0;
    char link[64];
    char path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return fault_for(op, path);
}

/* The error to fail a rename of `path` (relative to `dirfd`) with. */
static int fault_for_at(int dirfd, const char *path) {
    if (getenv("QUIVER_IO_FAULTS") == NULL || path == NULL) return 0;
    if (path[0] == '/' || dirfd == AT_FDCWD) {
        char absolute[4096];
        if (path[0] == '/') return fault_for(OP_RENAME, path);
        if (getcwd(absolute, sizeof absolute) == NULL) return 0;
        strncat(absolute, "/", sizeof absolute - strlen(absolute) - 1);
        strncat(absolute, path, sizeof absolute - strlen(absolute) - 1);
        return fault_for(OP_RENAME, absolute);
    }
    return fault_for_fd(OP_RENAME, dirfd);
}

/* The next definition of `name` (libc's), looked up once. */
#define REAL(name) \
    static __typeof__(&name) real = NULL; \
    if (real == NULL) real = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

#define FAIL_IF(error) \
    do { int e = (error); if (e) { errno = e; return -1; } } while (0)

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write);
    FAIL_IF(fault_for_fd(OP_WRITE, fd));
    return real(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite);
    FAIL_IF(fault_for_fd(OP_WRITE, fd));
    return real(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    REAL(pwrite64);
    FAIL_IF(fault_for_fd(OP_WRITE, fd));
    return real(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    REAL(writev);
    FAIL_IF(fault_for_fd(OP_WRITE, fd));
    return real(fd, iov, count);
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t offset) {
    REAL(pwritev);
    FAIL_IF(fault_for_fd(OP_WRITE, fd));
    return real(fd, iov, count, offset);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int count, off64_t offset) {
    REAL(pwritev64);
    FAIL_IF(fault_for_fd(OP_WRITE, fd));
    return real(fd, iov, count, offset);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    REAL(pwritev2);
    FAIL_IF(fault_for_fd(OP_WRITE, fd));
    return real(fd, iov, count, offset, flags);
}

int fsync(int fd) {
    REAL(fsync);
    FAIL_IF(fault_for_fd(OP_FSYNC, fd));
    return real(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync);
    FAIL_IF(fault_for_fd(OP_FSYNC, fd));
    return real(fd);
}

int fallocate(int fd, int mode, off_t offset, off_t length) {
    REAL(fallocate);
    FAIL_IF(fault_for_fd(OP_ALLOCATE, fd));
    return real(fd, mode, offset, length);
}

int fallocate64(int fd, int mode, off64_t offset, off64_t length) {
    REAL(fallocate64);
    FAIL_IF(fault_for_fd(OP_ALLOCATE, fd));
    return real(fd, mode, offset, length);
}

/* posix_fallocate returns the error instead of setting errno. */
int posix_fallocate(int fd, off_t offset, off_t length) {
    REAL(posix_fallocate);
    int error = fault_for_fd(OP_ALLOCATE, fd);
    return error ? error : real(fd, offset, length);
}

int rename(const char *from, const char *to) {
    REAL(rename);
    FAIL_IF(fault_for_at(AT_FDCWD, from));
    FAIL_IF(fault_for_at(AT_FDCWD, to));
    return real(from, to);
}

int renameat(int from_dir, const char *from, int to_dir, const char *to) {
    REAL(renameat);
    FAIL_IF(fault_for_at(from_dir, from));
    FAIL_IF(fault_for_at(to_dir, to));
    return real(from_dir, from, to_dir, to);
}

int renameat2(int from_dir, const char *from, int to_dir, const char *to, unsigned int flags) {
    REAL(renameat2);
    FAIL_IF(fault_for_at(from_dir, from));
    FAIL_IF(fault_for_at(to_dir, to));
    return real(from_dir, from, to_dir, to, flags);
}
