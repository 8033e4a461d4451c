/* A process that starts threads all the time, for attaching to while it
 * does: `spawner SPAWNERS IDLE CHILD_MS`.
 *
 * Half the SPAWNERS threads are started first, then IDLE threads that only
 * wait (so that attaching to every thread takes a while), then the other
 * half. Each spawner starts a child thread every 10 ms until `go`: a line
 * on stdin (lotus has attached). Each child waits for `go`, then burns
 * CHILD_MS of its own CPU time and ends. The program prints `ready` once
 * the threads are there; once every thread has ended, `child TID NS` for
 * each child (NS: the CPU time it ran after `go`), then `end`. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_PER_SPAWNER 2000
#define MAX_CHILDREN 100000

static atomic_int go, stop;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static long long child_ns;
static struct {
    long tid;
    long long ns;
} done[MAX_CHILDREN];
static int ndone;

static long long thread_cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void nap(long ns) {
    struct timespec d = {0, ns};
    nanosleep(&d, NULL);
}

static void *child(void *arg) {
    (void)arg;
    while (!atomic_load(&go))
        nap(1000000);
    volatile unsigned long x = 0;
    long long at_go = thread_cpu_ns(), now;
    while ((now = thread_cpu_ns()) - at_go < child_ns)
        for (int i = 0; i < 1000; i++)
            x += i;
    pthread_mutex_lock(&lock);
    if (ndone < MAX_CHILDREN) {
        done[ndone].tid = syscall(SYS_gettid);
        done[ndone].ns = now - at_go;
        ndone++;
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void *spawner(void *arg) {
    (void)arg;
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 * 1024);
    pthread_t *children = calloc(MAX_PER_SPAWNER, sizeof *children);
    int n = 0;
    while (!atomic_load(&go) && n < MAX_PER_SPAWNER) {
        if (pthread_create(&children[n], &small, child, NULL) != 0)
            break;
        n++;
        nap(10000000);
    }
    for (int i = 0; i < n; i++)
        pthread_join(children[i], NULL);
    free(children);
    return NULL;
}

static void *idle(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!atomic_load(&stop))
        pthread_cond_wait(&wake, &lock);
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    int spawners = atoi(argv[1]), idles = atoi(argv[2]);
    child_ns = (long long)(atof(argv[3]) * 1e6);
    pthread_t *threads = calloc(spawners + idles, sizeof *threads);
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 * 1024);
    int n = 0;
    for (int i = 0; i < spawners / 2; i++)
        pthread_create(&threads[n++], NULL, spawner, NULL);
    for (int i = 0; i < idles; i++)
        pthread_create(&threads[n++], &small, idle, NULL);
    for (int i = spawners / 2; i < spawners; i++)
        pthread_create(&threads[n++], NULL, spawner, NULL);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 3;
    atomic_store(&go, 1);
    /* The spawners end once their children have. */
    for (int i = 0; i < n; i++)
        if (i < spawners / 2 || i >= spawners / 2 + idles)
            pthread_join(threads[i], NULL);
    atomic_store(&stop, 1);
    pthread_mutex_lock(&lock);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    for (int i = spawners / 2; i < spawners / 2 + idles; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < ndone; i++)
        printf("child %ld %lld\n", done[i].tid, done[i].ns);
    printf("end\n");
    return 0;
}
