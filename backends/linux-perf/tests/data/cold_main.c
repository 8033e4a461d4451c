/* Calls hot_entry(SECONDS) of the library it is linked with, without the
 * pipes of burn.c: the training run of libcold.c's profile feedback, and
 * the target that `perf record` profiles in the comparison tests. */
#include <stdlib.h>

void hot_entry(double secs);

int main(int argc, char **argv) {
    hot_entry(argc > 1 ? atof(argv[1]) : 0.1);
    return 0;
}
