/* A stand-in for AMD uProf's profile-control library
 * (libAMDProfileController.so), built by the tests with gcc.
 *
 * Which API it exports is chosen when it is compiled:
 *   -DAPI5  bool amdProfileResumeImpl(void), bool amdProfilePauseImpl(void)
 *   -DAPI4  bool amdProfileResume(unsigned), bool amdProfilePause(unsigned)
 *   neither: only an unrelated function
 * -DLAST_ERROR=N  also exports int amdGetLastProfileError(void) returning N
 * -DFAIL_RESUME / -DFAIL_PAUSE  that call returns false
 *
 * Each call appends one line to the file named by UPROF_STANDIN_LOG: the
 * function's name, and for 4.x the argument ("amdProfileResume 1"). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef FAIL_RESUME
#define RESUME_RESULT false
#else
#define RESUME_RESULT true
#endif
#ifdef FAIL_PAUSE
#define PAUSE_RESULT false
#else
#define PAUSE_RESULT true
#endif

__attribute__((unused)) static void record(const char *name, long arg) {
    const char *path = getenv("UPROF_STANDIN_LOG");
    if (path == NULL || *path == '\0') return;
    FILE *f = fopen(path, "a");
    if (f == NULL) return;
    if (arg < 0)
        fprintf(f, "%s\n", name);
    else
        fprintf(f, "%s %ld\n", name, arg);
    fclose(f);
}

#if defined(API5)
bool amdProfileResumeImpl(void) { record("amdProfileResumeImpl", -1); return RESUME_RESULT; }
bool amdProfilePauseImpl(void) { record("amdProfilePauseImpl", -1); return PAUSE_RESULT; }
#elif defined(API4)
bool amdProfileResume(unsigned int mode) { record("amdProfileResume", (long)mode); return RESUME_RESULT; }
bool amdProfilePause(unsigned int mode) { record("amdProfilePause", (long)mode); return PAUSE_RESULT; }
#else
int amdProfileSomethingElse(void) { return 0; }
#endif

#ifdef LAST_ERROR
int amdGetLastProfileError(void) { return LAST_ERROR; }
#endif
