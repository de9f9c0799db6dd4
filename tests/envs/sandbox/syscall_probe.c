/* Makes, each in a child process of its own, the calls the sandboxes' system-call filter
 * refuses, with arguments under which each succeeds when nothing refuses it, and prints one
 * line per call: "<name> ok", "<name> refused <errno>" or "<name> killed <signal>".
 *
 *   syscall_probe [FILTER]   FILTER: a compiled seccomp program (the bytes bwrap gets) to
 *                            load before the calls; without it the calls run unfiltered.
 *
 * Built with gcc by the tests (tests/envs/sandbox/probe.py); x86-64 only (the 32-bit call is
 * `int $0x80`). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_fsopen
#define SYS_fsopen 430
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#define PER_BSD 0x0006
#define KEYCTL_GET_KEYRING_ID 0
#define KEY_SPEC_USER_KEYRING (-4)

static long int80_getpid(void) {
    long ret;
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20) : "memory"); /* 32-bit getpid */
    return ret;
}

static volatile int thread_returned;

static void *int80_thread(void *arg) {
    (void)arg;
    int80_getpid();
    thread_returned = 1;
    return NULL;
}

/* each returns 0 on success, else an errno; the child's exit status carries it */
static int p_int80(void) { return int80_getpid() == getpid() ? 0 : 255; }

static int p_int80_thread(void) {
    /* another thread makes the 32-bit call: 249 when that thread alone was killed (this one
     * lives on and sees it never returned), a kill by signal when the whole process was */
    pthread_t t;
    if (pthread_create(&t, NULL, int80_thread, NULL) != 0) return 254;
    pthread_join(t, NULL);
    return thread_returned ? 0 : 249;
}

static int forklike(long ret) {
    if (ret < 0) return errno;
    if (ret == 0) _exit(0);
    waitpid((pid_t)ret, NULL, __WALL);
    return 0;
}

static int p_clone3(void) {
    uint64_t args[11] = {0};
    args[4] = SIGCHLD; /* exit_signal */
    return forklike(syscall(SYS_clone3, args, sizeof args));
}

static int clone_flags(unsigned long flags) {
    return forklike(syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0));
}

static int p_clone_newuser(void) { return clone_flags(CLONE_NEWUSER); }
static int p_clone_newns(void) { return clone_flags(CLONE_NEWNS); }
static int p_clone_newuser_newns(void) { return clone_flags(CLONE_NEWUSER | CLONE_NEWNS); }

static int p_io_uring_setup(void) {
    char params[120] = {0};
    return syscall(SYS_io_uring_setup, 4, params) < 0 ? errno : 0;
}

static int p_keyctl(void) {
    return syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0) < 0 ? errno : 0;
}

static int p_fsopen(void) { return syscall(SYS_fsopen, "tmpfs", 0) < 0 ? errno : 0; }

static int p_open_tree(void) { return syscall(SYS_open_tree, AT_FDCWD, "/", 0) < 0 ? errno : 0; }

static int p_move_mount(void) {
    /* the /proc mount moved onto a new folder (the host-side run is in a private mount
     * namespace of its own, tests/envs/sandbox/probe.py; the probe runs last) */
    char dir[] = "/tmp/memrl-probe-XXXXXX";
    if (!mkdtemp(dir)) return 252;
    int rc = syscall(SYS_move_mount, AT_FDCWD, "/proc", AT_FDCWD, dir, 0) < 0 ? errno : 0;
    if (rc == 0) syscall(SYS_umount2, dir, 2 /* MNT_DETACH */);
    rmdir(dir);
    return rc;
}

static int p_pidfd_getfd(void) {
    pid_t kid = fork();
    if (kid == 0) { pause(); _exit(0); }
    long pidfd = syscall(SYS_pidfd_open, kid, 0);
    int rc = pidfd < 0 ? 250 : (syscall(SYS_pidfd_getfd, pidfd, 0, 0) < 0 ? errno : 0);
    kill(kid, SIGKILL);
    waitpid(kid, NULL, 0);
    return rc;
}

static int p_personality(void) { return syscall(SYS_personality, PER_BSD) < 0 ? errno : 0; }

static int p_getpid(void) { return syscall(SYS_getpid) > 0 ? 0 : 255; }

struct probe { const char *name; int (*fn)(void); };

static const struct probe PROBES[] = {
    {"getpid", p_getpid},  /* allowed everywhere: shows the program itself works */
    {"int80", p_int80},
    {"int80_thread", p_int80_thread},
    {"clone3", p_clone3},
    {"clone_newuser", p_clone_newuser},
    {"clone_newns", p_clone_newns},
    {"clone_newuser_newns", p_clone_newuser_newns},
    {"io_uring_setup", p_io_uring_setup},
    {"keyctl", p_keyctl},
    {"fsopen", p_fsopen},
    {"open_tree", p_open_tree},
    {"pidfd_getfd", p_pidfd_getfd},
    {"personality", p_personality},
    {"move_mount", p_move_mount},
};

static int load_filter(const char *path) {
    static unsigned char buf[65536];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n <= 0 || n % 8) return -1;
    struct sock_fprog prog = {.len = (unsigned short)(n / 8), .filter = (struct sock_filter *)buf};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
    return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && load_filter(argv[1]) != 0) {
        printf("filter not loaded: %s\n", strerror(errno));
        return 2;
    }
    for (size_t i = 0; i < sizeof PROBES / sizeof PROBES[0]; i++) {
        pid_t kid = fork();
        if (kid == 0) _exit(PROBES[i].fn());
        int status = 0;
        waitpid(kid, &status, 0);
        if (WIFSIGNALED(status)) printf("%s killed %d\n", PROBES[i].name, WTERMSIG(status));
        else if (WEXITSTATUS(status) == 0) printf("%s ok\n", PROBES[i].name);
        else printf("%s refused %d\n", PROBES[i].name, WEXITSTATUS(status));
    }
    return 0;
}
