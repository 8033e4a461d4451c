/*
 * A native program that opens lotus windows around the iterations of a
 * loop, so that `lotus map` sees the loop's functions and not the set-up's.
 *
 * Build against the control library (crate lotus-control; a workspace
 * `cargo build --release` puts liblotus_control.so in target/release/):
 *
 *   cc -O1 -g -o windows lotus-cli/examples/windows.c \
 *      -Ilotus-control/include -Ltarget/release -Wl,-rpath,$PWD/target/release \
 *      -llotus_control
 *
 * and map it (an executable given in place of a .py file is an op of its
 * own, named after the file):
 *
 *   lotus map --backend perf ./windows
 *
 * Run on its own, outside lotus, every lotus_* call is a no-op that
 * succeeds. Each phase burns a fixed amount of CPU time (not wall time),
 * so its share of the samples does not depend on how busy the machine is.
 * Exit status: 0, or 1 when lotus refuses a call (lotus_last_error says
 * why).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lotus.h"

#define ITERATIONS 5

static volatile double sink;

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* The set-up: outside any window, so not in the mapping. */
__attribute__((noinline)) static void prepare_input(double seconds) {
    double end = cpu_seconds() + seconds, x = 1.0;
    while (cpu_seconds() < end)
        for (int i = 0; i < 10000; i++) x = x * 1.0000001 + 0.5;
    sink = x;
}

/* The work to map: one call per iteration, each inside a window. */
__attribute__((noinline)) static void transform_batch(double seconds) {
    double end = cpu_seconds() + seconds, x = 2.0;
    while (cpu_seconds() < end)
        for (int i = 0; i < 10000; i++) x = x * 0.9999999 + 0.25;
    sink = x;
}

static void check(int rc, const char *what) {
    if (rc != 0) {
        fprintf(stderr, "windows: %s: %s\n", what, lotus_last_error());
        exit(1);
    }
}

int main(void) {
    /* Binds the control channel to this process before anything forks. */
    printf("under lotus: %s\n", lotus_active() ? "yes" : "no");
    prepare_input(0.3);
    for (int i = 0; i < ITERATIONS; i++) {
        check(lotus_resume("transform_batch"), "lotus_resume");
        transform_batch(0.06);
        check(lotus_pause(), "lotus_pause");
    }
    return 0;
}
