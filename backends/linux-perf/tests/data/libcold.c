/* Test library for symbolization: with profile feedback (built -O2 -g
 * -fprofile-use after a -fprofile-generate run of cold_main.c, which never
 * takes the `rare` branches) GCC splits mix_step and fold_step into a hot
 * part and a `.cold` part, as PGO and -O2 builds of CPython do.
 *
 * hot_entry(secs) burns `secs` of this thread's CPU time in the two
 * functions (burn.c's lib mode calls it; so does cold_main.c). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile int rare;
volatile unsigned long cold_sink;

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) unsigned long mix_step(unsigned long x) {
    for (int i = 0; i < 20000; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        if (rare) {
            fprintf(stderr, "mix_step: rare path at %d (%lu)\n", i, x);
            x ^= (unsigned long)rand() * 31 + (unsigned long)i;
            if (x % 7 == 3) abort();
        }
    }
    return x;
}

__attribute__((noinline)) unsigned long fold_step(unsigned long x) {
    for (int i = 0; i < 20000; i++) {
        x ^= x >> 13;
        x *= 0xff51afd7ed558ccdUL;
        if (rare) {
            fprintf(stderr, "fold_step: rare path at %d (%lu)\n", i, x);
            x += (unsigned long)rand() ^ (unsigned long)i;
            if (x % 5 == 1) abort();
        }
    }
    return x;
}

void hot_entry(double secs) {
    double end = cpu_now() + secs;
    unsigned long x = 1;
    while (cpu_now() < end) x = fold_step(mix_step(x));
    cold_sink = x;
}
