/*
 * A stand-in "VTune" ITT collector for the task tests: a shared library
 * exporting __itt_api_init, loaded by the ITT static part (as built into
 * the `ittapi` Python package) from INTEL_LIBITTNOTIFY64. It takes
 * __itt_domain_create, __itt_string_handle_create, __itt_task_begin and
 * __itt_task_end and appends one line per call to the file named by
 * LOTUS_TEST_ITT_TASK_LOG:
 *
 *   begin <pid> <tid> <domain> <name>
 *   end <pid> <tid> <domain>
 *
 * Each line is one write(2) to an O_APPEND file, so lines of threads and
 * processes never mix, and a killed process leaves every line it wrote.
 *
 * Build: cc -shared -fPIC -o libitt_task_recorder.so itt_task_recorder.c
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct recorder_api_entry {
    const char *name;
    void **func_ptr;
    void *init_func;
    void *null_func;
    int group;
};

struct recorder_itt_global {
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
    struct recorder_api_entry *api_list_ptr;
};

/* __itt_domain and __itt_string_handle (ittnotify.h). */
struct recorder_domain {
    volatile int flags;
    const char *nameA;
    void *nameW;
    int extra1;
    void *extra2;
    struct recorder_domain *next;
};

struct recorder_string_handle {
    const char *strA;
    void *strW;
    int extra1;
    void *extra2;
    struct recorder_string_handle *next;
};

typedef struct { unsigned long long d1, d2, d3; } recorder_id;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct recorder_domain *domains;
static struct recorder_string_handle *handles;

static void record(const char *line)
{
    const char *path = getenv("LOTUS_TEST_ITT_TASK_LOG");
    int fd;
    if (path == NULL || (fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) < 0)
        return;
    if (write(fd, line, strlen(line)) < 0) {
        /* nothing to do: the test sees the line missing */
    }
    close(fd);
}

static struct recorder_domain *recorder_domain_create(const char *name)
{
    struct recorder_domain *d;
    pthread_mutex_lock(&lock);
    for (d = domains; d != NULL; d = d->next)
        if (strcmp(d->nameA, name) == 0)
            break;
    if (d == NULL && (d = calloc(1, sizeof *d)) != NULL) {
        d->flags = 1;
        d->nameA = strdup(name);
        d->next = domains;
        domains = d;
    }
    pthread_mutex_unlock(&lock);
    return d;
}

static struct recorder_string_handle *recorder_string_handle_create(const char *name)
{
    struct recorder_string_handle *h;
    pthread_mutex_lock(&lock);
    for (h = handles; h != NULL; h = h->next)
        if (strcmp(h->strA, name) == 0)
            break;
    if (h == NULL && (h = calloc(1, sizeof *h)) != NULL) {
        h->strA = strdup(name);
        h->next = handles;
        handles = h;
    }
    pthread_mutex_unlock(&lock);
    return h;
}

static void recorder_task_begin(const struct recorder_domain *d, recorder_id id, recorder_id parent,
                                const struct recorder_string_handle *name)
{
    char line[512];
    (void)id;
    (void)parent;
    snprintf(line, sizeof line, "begin %d %ld %s %s\n", (int)getpid(), (long)syscall(SYS_gettid),
             d ? d->nameA : "-", name ? name->strA : "-");
    record(line);
}

static void recorder_task_end(const struct recorder_domain *d)
{
    char line[512];
    snprintf(line, sizeof line, "end %d %ld %s\n", (int)getpid(), (long)syscall(SYS_gettid),
             d ? d->nameA : "-");
    record(line);
}

void __itt_api_init(struct recorder_itt_global *global, int groups)
{
    static const unsigned char magic[8] = {0xED, 0xAB, 0xAB, 0xEC, 0x0D, 0xEE, 0xDA, 0x30};
    struct recorder_api_entry *e;
    (void)groups;
    if (global == NULL || memcmp(global->magic, magic, sizeof magic) != 0 ||
        global->version_major != 3 || global->version_build <= 20101001 ||
        global->api_list_ptr == NULL) {
        record("unknown ITT static part\n");
        return;
    }
    for (e = global->api_list_ptr; e->name != NULL; e++) {
        if (strcmp(e->name, "__itt_domain_create") == 0)
            *e->func_ptr = (void *)recorder_domain_create;
        else if (strcmp(e->name, "__itt_string_handle_create") == 0)
            *e->func_ptr = (void *)recorder_string_handle_create;
        else if (strcmp(e->name, "__itt_task_begin") == 0)
            *e->func_ptr = (void *)recorder_task_begin;
        else if (strcmp(e->name, "__itt_task_end") == 0)
            *e->func_ptr = (void *)recorder_task_end;
    }
}
