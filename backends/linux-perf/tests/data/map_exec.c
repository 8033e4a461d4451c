/* Test target: runs code from a file it maps itself (not an ELF library
 * the loader would check), so that samples land in that file, whatever
 * its headers claim.
 *
 * usage: map_exec OUT_FD IN_FD FILE OFFSET SECONDS
 *   writes 'r', waits for a byte, maps FILE readable and executable,
 *   calls the function at file offset OFFSET (hex) until the thread has
 *   used SECONDS of CPU time, writes 'd', waits for a byte, exits.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int out_fd, in_fd;
static void say(char c) { if (write(out_fd, &c, 1) != 1) _exit(3); }
static void wait_go(void) { char c; if (read(in_fd, &c, 1) != 1) _exit(4); }
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 6) return 2;
    out_fd = atoi(argv[1]);
    in_fd = atoi(argv[2]);
    unsigned long offset = strtoul(argv[4], NULL, 16);
    double secs = atof(argv[5]);
    int fd = open(argv[3], O_RDONLY);
    if (fd < 0) return 5;
    long page = sysconf(_SC_PAGESIZE);
    size_t len = (offset / page + 1) * page;
    char *base = mmap(NULL, len, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) return 6;
    close(fd);
    void (*f)(void) = (void (*)(void))(base + offset);
    say('r');
    wait_go();
    double end = cpu_now() + secs;
    while (cpu_now() < end) f();
    say('d');
    wait_go();
    return 0;
}
