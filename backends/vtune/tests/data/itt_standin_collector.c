/*
 * A stand-in ITT collector for tests: a shared library that exports
 * __itt_api_init, which the ITT static part calls after loading the library
 * named by INTEL_LIBITTNOTIFY64 (the way it loads VTune's collector). It
 * points the static part's __itt_resume / __itt_pause / __itt_detach at
 * functions that append "resume", "pause" or "detach" to the file named by
 * LOTUS_TEST_ITT_LOG, and leaves every other entry alone. When
 * LOTUS_TEST_ITT_CPU_LOG names a file too, each resume and pause also
 * appends "resume SECONDS" / "pause SECONDS" there: the process's CPU time
 * at that point, so tests measure a window by the CPU time it held.
 *
 * Build: cc -shared -fPIC -o libitt_standin.so itt_standin_collector.c
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The start of ittnotify's descriptor and of its API table entries (static
 * parts built after 2010-10-01), as far as this collector reads them. */
struct standin_api_entry {
    const char *name;
    void **func_ptr;
    void *init_func;
    void *null_func;
    int group;
};

struct standin_itt_global {
    unsigned char magic[8];
    unsigned long version_major;
    unsigned long version_minor;
    unsigned long version_build;
    long api_initialized;
    long mutex_initialized;
    long atomic_counter;
    pthread_mutex_t mutex;
    void *lib;
    void *error_handler;
    const char **dll_path_ptr;
    struct standin_api_entry *api_list_ptr;
};

static void log_call(const char *what)
{
    const char *path = getenv("LOTUS_TEST_ITT_LOG");
    FILE *f;
    if (path == NULL || (f = fopen(path, "a")) == NULL)
        return;
    fprintf(f, "%s\n", what);
    fclose(f);
}

static void log_cpu_time(const char *what)
{
    const char *path = getenv("LOTUS_TEST_ITT_CPU_LOG");
    struct timespec ts;
    FILE *f;
    if (path == NULL || clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0 ||
        (f = fopen(path, "a")) == NULL)
        return;
    fprintf(f, "%s %.6f\n", what, ts.tv_sec + ts.tv_nsec * 1e-9);
    fclose(f);
}

static void standin_resume(void) { log_cpu_time("resume"); log_call("resume"); }
static void standin_pause(void) { log_call("pause"); log_cpu_time("pause"); }
static void standin_detach(void) { log_call("detach"); }

void __itt_api_init(struct standin_itt_global *global, int groups)
{
    static const unsigned char magic[8] = {0xED, 0xAB, 0xAB, 0xEC, 0x0D, 0xEE, 0xDA, 0x30};
    struct standin_api_entry *e;
    (void)groups;
    if (global == NULL || memcmp(global->magic, magic, sizeof magic) != 0 ||
        global->version_major != 3 || global->version_build <= 20101001 ||
        global->api_list_ptr == NULL) {
        log_call("unknown ITT static part");
        return;
    }
    for (e = global->api_list_ptr; e->name != NULL; e++) {
        if (strcmp(e->name, "__itt_resume") == 0)
            *e->func_ptr = (void *)standin_resume;
        else if (strcmp(e->name, "__itt_pause") == 0)
            *e->func_ptr = (void *)standin_pause;
        else if (strcmp(e->name, "__itt_detach") == 0)
            *e->func_ptr = (void *)standin_detach;
    }
}
