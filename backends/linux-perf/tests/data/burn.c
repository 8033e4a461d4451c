/* Test target for the perf backend: burns CPU in functions with known
 * names, in phases that the test switches through two pipes.
 *
 * usage: burn OUT_FD IN_FD MODE SECONDS
 *   OUT_FD: the program writes one letter here at each phase change
 *   IN_FD:  and waits here for one byte before going on
 * modes:
 *   both    'r', wait, spin_alpha and spin_beta alternately, 'd', wait
 *   phases  spin_alpha (unprofiled), 'a', wait, spin_beta, 'b', wait
 *   fork    'r', wait, a forked child runs spin_child and exits, then a
 *           thread runs spin_thread, 'd', wait
 *   lib     'r', wait, hot_entry() from libhot.so, 'd', wait
 *   solo    spin_alpha and spin_beta for SECONDS, no pipes (OUT and IN
 *           are ignored): for comparisons with `perf record`
 *   clock   'r', wait, calls clock_gettime in a loop, 'd', wait
 *   kernel  'r', wait, fault_pages in a loop: maps 1 MiB of fresh memory,
 *           touches every page, unmaps it (most of the time goes to the
 *           kernel's page fault and unmap code), 'd', wait
 *   sleepers  forks two children that sleep, 'r', sleeps
 *
 * SECONDS is CPU time of the thread that runs the phase, not wall time: on
 * a busy machine a phase still burns as much CPU (and so gets as many
 * samples) as on an idle one; it only takes longer.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int out_fd, in_fd;
volatile unsigned long sink;

static void say(char c) { if (write(out_fd, &c, 1) != 1) _exit(3); }
static void wait_go(void) { char c; if (read(in_fd, &c, 1) != 1) _exit(4); }
static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* CPU time used by the calling thread. */
static double cpu_now(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }

__attribute__((noinline)) void spin_alpha(void) { for (unsigned long i = 0; i < 200000; i++) sink += i * i; }
__attribute__((noinline)) void spin_beta(void) { for (unsigned long i = 0; i < 200000; i++) sink ^= i * 7; }
__attribute__((noinline)) void spin_child(void) { for (unsigned long i = 0; i < 200000; i++) sink += i ^ 3; }
__attribute__((noinline)) void spin_thread(void) { for (unsigned long i = 0; i < 200000; i++) sink += i | 5; }

/* One 1 MiB map, every page written (a page fault each), unmapped. */
__attribute__((noinline)) void fault_pages(void) {
    const size_t len = 1 << 20;
    long page = sysconf(_SC_PAGESIZE);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(7);
    for (size_t i = 0; i < len; i += (size_t)page) p[i] = (char)i;
    sink += (unsigned char)p[len - 1];
    if (munmap(p, len) != 0) _exit(8);
}

/* Calls f until the calling thread has used `secs` more CPU time. */
static void run(void (*f)(void), double secs) {
    double end = cpu_now() + secs;
    while (cpu_now() < end) f();
}

static void alternate(double secs) {
    double end = cpu_now() + secs;
    while (cpu_now() < end) { spin_alpha(); spin_beta(); }
}

static double secs;
static void *thread_main(void *arg) { (void)arg; run(spin_thread, secs); return NULL; }

#ifdef WITH_LIB
void hot_entry(double secs);
#endif

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: burn OUT IN MODE SECS\n"); return 2; }
    out_fd = atoi(argv[1]);
    in_fd = atoi(argv[2]);
    const char *mode = argv[3];
    secs = atof(argv[4]);
    if (!strcmp(mode, "solo")) {
        alternate(secs);
    } else if (!strcmp(mode, "both")) {
        say('r'); wait_go();
        alternate(secs);
        say('d'); wait_go();
    } else if (!strcmp(mode, "phases")) {
        run(spin_alpha, secs);
        say('a'); wait_go();
        run(spin_beta, secs);
        say('b'); wait_go();
    } else if (!strcmp(mode, "fork")) {
        say('r'); wait_go();
        pid_t pid = fork();
        if (pid == 0) { run(spin_child, secs); _exit(0); }
        int status;
        if (waitpid(pid, &status, 0) != pid) return 5;
        pthread_t t;
        if (pthread_create(&t, NULL, thread_main, NULL) != 0) return 6;
        pthread_join(t, NULL);
        say('d'); wait_go();
#ifdef WITH_LIB
    } else if (!strcmp(mode, "lib")) {
        say('r'); wait_go();
        hot_entry(secs);
        say('d'); wait_go();
#endif
    } else if (!strcmp(mode, "clock")) {
        say('r'); wait_go();
        /* CLOCK_MONOTONIC is answered in the vDSO (the code under test);
         * the thread's CPU clock, a system call, is read only now and then. */
        double end = cpu_now() + secs;
        do {
            for (int i = 0; i < 1000; i++) (void)clock_s(CLOCK_MONOTONIC);
        } while (cpu_now() < end);
        say('d'); wait_go();
    } else if (!strcmp(mode, "kernel")) {
        say('r'); wait_go();
        run(fault_pages, secs);
        say('d'); wait_go();
    } else if (!strcmp(mode, "sleepers")) {
        for (int i = 0; i < 2; i++) if (fork() == 0) { sleep(100); _exit(0); }
        say('r');
        sleep(100);
    } else {
        return 2;
    }
    return 0;
}
