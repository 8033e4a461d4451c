/*
 * lotus.h: the lotus control library (liblotus_control.so).
 *
 * A process profiled by lotus calls these functions to open and close the
 * measurement window around the code it wants mapped:
 *
 *     #include "lotus.h"
 *
 *     lotus_active();                    // bind the channel before forking
 *     warm_up();
 *     if (lotus_resume("MyOp") != 0)
 *         fprintf(stderr, "lotus: %s\n", lotus_last_error());
 *     for (int i = 0; i < n; i++) my_op();
 *     lotus_pause();
 *     lotus_detach();
 *
 * Link with -llotus_control (the library is built beside the `lotus`
 * binary) or load it with dlopen.
 *
 * The lotus process says which backend is active through the environment:
 * LOTUS_BACKEND ("perf", "vtune", "uprof") and, for backends whose window
 * is switched by the lotus process, LOTUS_CONTROL_FDS="<read_fd>,<write_fd>"
 * (a pipe pair). The library reads them once, on its first call.
 *
 *  - Not under lotus (neither variable set): every call succeeds and does
 *    nothing, so the same program runs standalone.
 *  - With LOTUS_CONTROL_FDS: each call sends one request line and blocks
 *    until the lotus process replies, which it does once it has noted the
 *    window's start (or end) time: the perf backend's samplers and
 *    counters run from exec on, and a window keeps the samples whose
 *    kernel timestamps fall between resume and pause (switching them by
 *    ioctl is an option of the backend, not the default). When
 *    lotus_resume returns 0 the window is open.
 *  - LOTUS_BACKEND=vtune without a channel: calls go to __itt_resume /
 *    __itt_pause / __itt_detach (VTune's collector, named by
 *    INTEL_LIBITTNOTIFY64 when VTune runs the process).
 *  - LOTUS_BACKEND=uprof without a channel: calls go to AMD uProf's
 *    profile-control library (libAMDProfileController.so, 5.x or 4.x API),
 *    found through LOTUS_UPROF_CONTROL_LIB, $AMDUPROF_HOME/lib/x64/shared,
 *    /opt/AMDuProf* or the library path.
 *  - A malformed environment: calls return -1 with the reason.
 *
 * Processes: the channel belongs to the process that first called the
 * library. A child created by fork() (a DataLoader worker) gets -1
 * ("... called from a forked process") instead of interleaving its
 * messages with the parent's; call lotus_active() before forking so the
 * parent owns the channel. A program the process executes (fork then
 * exec: a native op a Python script starts with subprocess) is a new
 * process with a fresh copy of this library: the descriptors are left
 * inheritable (the lotus harness also passes them through Python's
 * subprocess, which closes other descriptors), so its first call binds the
 * channel to it and its windows reach lotus as the parent's do. The two
 * share one channel: the parent must not call while the program may (it
 * waits for it, as subprocess.run does), or a reply may reach the wrong
 * process.
 *
 * uProf's names: the library also exports AMD's profile-control entry
 * points (bool amdProfileResume(unsigned), bool amdProfilePause(unsigned),
 * bool amdProfileResumeImpl(void), bool amdProfilePauseImpl(void), int
 * amdGetLastProfileError(void)), so code written for uProf and linked with
 * -llotus_control in place of -lAMDProfileController opens these windows
 * (they are not declared here: use AMD's header).
 *
 * Threads: calls are serialized by a lock; lotus_last_error is per thread.
 *
 * Signals: if the lotus process has exited, writing the request raises
 * SIGPIPE unless the process ignores it (Python does); the call then
 * returns -1.
 */
#ifndef LOTUS_H
#define LOTUS_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Opens a measurement window for the op named `op` (NULL or "" when
 * unnamed). Returns 0 once the window is open, -1 on failure (see
 * lotus_last_error). Not under lotus: returns 0 and does nothing.
 */
int lotus_resume(const char *op);

/* Closes the open measurement window. 0 on success, -1 on failure. */
int lotus_pause(void);

/*
 * Says no window will open again in this process and closes the channel.
 * Later lotus_pause / lotus_detach calls are no-ops; lotus_resume fails.
 * 0 on success, -1 on failure.
 */
int lotus_detach(void);

/*
 * Stops (on == 0) or restarts (on != 0) sampling this process outside
 * windows, and returns once lotus has done it: code timed in between runs
 * unsampled (lotus map times the op so, as the reference for what
 * sampling costs it). Not inside a window: lotus_resume restarts it
 * anyway. Under VTune and uProf, and not under lotus: returns 0 and does
 * nothing. 0 on success, -1 on failure (see lotus_last_error).
 */
int lotus_sampling(int on);

/*
 * The message of this thread's most recent failed call, "" when none has
 * failed. Successful calls leave it unchanged. The pointer stays valid
 * until the next failing call on the same thread; copy it to keep it.
 */
const char *lotus_last_error(void);

/* 1 when running under lotus (LOTUS_BACKEND or LOTUS_CONTROL_FDS set), else 0. */
int lotus_active(void);

/*
 * In a child created by fork(): makes this process the control channel's
 * owner, so its calls reach lotus (by default a forked child's fail). The
 * parent must not call the library until the child is done (lotus's fork
 * server, which forks one child per run after the op's imports, waits for
 * it). Returns 0.
 */
int lotus_adopt(void);

/* The active backend's name (LOTUS_BACKEND), or NULL. Valid for the process's life. */
const char *lotus_backend(void);

/*
 * Under `lotus trace run`, where this library is the ITT collector and
 * writes the ITT tasks it receives into the trace: writes the calling
 * thread's ended tasks now (they are otherwise written in blocks). For a
 * process about to leave through _exit (a DataLoader worker); lotus's
 * tracer calls it whenever it writes its own log. Otherwise does nothing.
 */
void lotus_itt_flush(void);

#ifdef __cplusplus
}
#endif

#endif /* LOTUS_H */
