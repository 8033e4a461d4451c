/* A library whose hot function has no symbol once stripped: hot_kernel is
 * hidden (so not in .dynsym) and `strip` removes .symtab. Only its FDE in
 * .eh_frame says where it starts. */
#include <time.h>

volatile unsigned long hot_sink;

__attribute__((visibility("hidden"), noinline)) void hot_kernel(void) {
    for (unsigned long i = 0; i < 300000; i++) hot_sink += (i * 2654435761u) >> 7;
}

void hot_entry(double secs) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double end = ts.tv_sec + ts.tv_nsec * 1e-9 + secs;
    for (;;) {
        hot_kernel();
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (ts.tv_sec + ts.tv_nsec * 1e-9 >= end) break;
    }
}
