/* A library whose hot function has no symbol once stripped: hot_kernel is
 * hidden (so not in .dynsym) and `strip` removes .symtab. Only its FDE in
 * .eh_frame says where it starts. */
#include <time.h>

volatile unsigned long hot_sink;

/* Many distinct instructions, so samples land on many addresses that must
 * all group into this one function. */
#define MIX(k) x = (x ^ (x >> (k % 13 + 1))) * (2654435761u + k); x += i * k;
#define MIX8(k) MIX(k) MIX(k + 1) MIX(k + 2) MIX(k + 3) MIX(k + 4) MIX(k + 5) MIX(k + 6) MIX(k + 7)

__attribute__((visibility("hidden"), noinline)) void hot_kernel(void) {
    unsigned long x = hot_sink;
    for (unsigned long i = 0; i < 20000; i++) {
        MIX8(1) MIX8(9) MIX8(17) MIX8(25)
    }
    hot_sink = x;
}

/* Runs hot_kernel until the calling thread has used `secs` more CPU time
 * (CPU, not wall time: the sample count must not depend on the machine's
 * load). */
void hot_entry(double secs) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    double end = ts.tv_sec + ts.tv_nsec * 1e-9 + secs;
    for (;;) {
        hot_kernel();
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        if (ts.tv_sec + ts.tv_nsec * 1e-9 >= end) break;
    }
}
