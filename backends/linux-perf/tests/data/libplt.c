/* Test library for PLT stub names: hot_entry(secs) calls tiny_add, which
 * lives in another shared library (libtiny.c), through this library's PLT,
 * millions of times, so a good share of the samples land in the stub
 * (`tiny_add@plt`). */
#include <time.h>

int tiny_add(int x);
volatile unsigned long plt_sink;

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void hot_entry(double secs) {
    double end = cpu_now() + secs;
    int x = 0;
    while (cpu_now() < end)
        for (int i = 0; i < 100000; i++) x = tiny_add(x);
    plt_sink = (unsigned long)x;
}
