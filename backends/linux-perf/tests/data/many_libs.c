/* Test target: burns CPU in six shared libraries in turn, built from
 * libhot.c as libhot1.so ... libhot6.so with hot_entry and hot_kernel
 * renamed hot_entry_N and hot_kernel_N (-D), so that its samples need
 * six libraries' symbols.
 *
 * usage: many_libs OUT_FD IN_FD SECONDS
 *   writes 'r', waits for a byte, calls hot_entry_1 ... hot_entry_6, each
 *   for SECONDS / 6 of the thread's CPU time, writes 'd', waits, exits.
 */
#include <stdlib.h>
#include <unistd.h>

void hot_entry_1(double secs);
void hot_entry_2(double secs);
void hot_entry_3(double secs);
void hot_entry_4(double secs);
void hot_entry_5(double secs);
void hot_entry_6(double secs);

static int out_fd, in_fd;
static void say(char c) { if (write(out_fd, &c, 1) != 1) _exit(3); }
static void wait_go(void) { char c; if (read(in_fd, &c, 1) != 1) _exit(4); }

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    out_fd = atoi(argv[1]);
    in_fd = atoi(argv[2]);
    double each = atof(argv[3]) / 6;
    say('r');
    wait_go();
    hot_entry_1(each);
    hot_entry_2(each);
    hot_entry_3(each);
    hot_entry_4(each);
    hot_entry_5(each);
    hot_entry_6(each);
    say('d');
    wait_go();
    return 0;
}
