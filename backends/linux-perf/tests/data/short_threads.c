/* Test target for sampling short-lived threads and processes: work done in
 * many threads (or forked workers) that each burn a little CPU and exit.
 *
 * usage: short_threads OUT_FD IN_FD MODE COUNT BURN_US RESULT_FILE
 *   OUT_FD: the program writes 'r' here when it is ready, 'd' when done
 *   IN_FD:  it waits here for one byte after each
 *   COUNT:  how many burners (threads) to start
 *   BURN_US: the CPU time each burner burns in burn_short (microseconds)
 *   RESULT_FILE: where it writes, when done, "<burners_ns> <job_ns>\n":
 *           the burners' own CLOCK_THREAD_CPUTIME_ID over their burn
 *           loops, summed; and the CPU time the whole job ran between the
 *           go byte and 'd' (this process's CLOCK_PROCESS_CPUTIME_ID,
 *           which keeps exited threads' time, and its waited-for
 *           children's, from getrusage): the ground truth a sampler
 *           should match
 * modes:
 *   serial  COUNT threads one after another, each burning BURN_US of its
 *           own CPU in burn_short, then exiting
 *   batch   the same in parallel batches of 8
 *   fork    COUNT/25 forked workers one after another, each running 25
 *           such threads in batches of 8, then exiting
 *   worker  COUNT/100 forked workers, each burning 100 x BURN_US in its
 *           main thread (a short-lived process, no threads)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int out_fd, in_fd;
volatile unsigned long sink;
/* Shared with forked workers: each adds its burners' CPU here. */
static unsigned long long *total_ns;
static unsigned long long burn_ns;

static void say(char c) { if (write(out_fd, &c, 1) != 1) _exit(3); }
static void wait_go(void) { char c; if (read(in_fd, &c, 1) != 1) _exit(4); }
static unsigned long long clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}
static unsigned long long thread_cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }
/* This process's CPU time and its waited-for children's. */
static unsigned long long job_cpu_ns(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) != 0) _exit(10);
    unsigned long long children = (unsigned long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull
        + (unsigned long long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
    return clock_ns(CLOCK_PROCESS_CPUTIME_ID) + children;
}

__attribute__((noinline)) void burn_short(void) { for (unsigned long i = 0; i < 20000; i++) sink += i * i; }

/* Burns `ns` of the calling thread's CPU in burn_short; adds what it used. */
static void burn_for(unsigned long long ns) {
    unsigned long long start = thread_cpu_ns(), now = start;
    while (now - start < ns) { burn_short(); now = thread_cpu_ns(); }
    __atomic_fetch_add(total_ns, now - start, __ATOMIC_RELAXED);
}

static void *short_main(void *arg) { (void)arg; burn_for(burn_ns); return NULL; }

static void threads(int count, int batch) {
    pthread_t t[8];
    for (int done = 0; done < count;) {
        int n = count - done < batch ? count - done : batch;
        for (int i = 0; i < n; i++)
            if (pthread_create(&t[i], NULL, short_main, NULL) != 0) _exit(6);
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        done += n;
    }
}

static void workers(int count, void (*body)(void)) {
    for (int i = 0; i < count; i++) {
        pid_t pid = fork();
        if (pid < 0) _exit(5);
        if (pid == 0) { body(); _exit(0); }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) _exit(7);
    }
}

static void threaded_worker(void) { threads(25, 8); }
static void plain_worker(void) { for (int i = 0; i < 100; i++) burn_for(burn_ns); }

int main(int argc, char **argv) {
    if (argc != 7) return 2;
    out_fd = atoi(argv[1]);
    in_fd = atoi(argv[2]);
    const char *mode = argv[3];
    int count = atoi(argv[4]);
    burn_ns = strtoull(argv[5], NULL, 10) * 1000ull;
    total_ns = mmap(NULL, sizeof *total_ns, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (total_ns == MAP_FAILED) return 8;
    say('r');
    wait_go();
    unsigned long long job_start = job_cpu_ns();
    if (!strcmp(mode, "serial")) threads(count, 1);
    else if (!strcmp(mode, "batch")) threads(count, 8);
    else if (!strcmp(mode, "fork")) workers(count / 25, threaded_worker);
    else if (!strcmp(mode, "worker")) workers(count / 100, plain_worker);
    else return 2;
    unsigned long long job = job_cpu_ns() - job_start;
    FILE *f = fopen(argv[6], "w");
    if (!f || fprintf(f, "%llu %llu\n", *total_ns, job) < 0 || fclose(f)) return 9;
    say('d');
    wait_go();
    return 0;
}
