"""Test target: a DataLoader-like worker process compresses data (native
code in libz) and exits before the profile is read.

usage: python3 worker.py OUT_FD IN_FD SECONDS [START_METHOD]

SECONDS is the worker's CPU time.

START_METHOD is multiprocessing's: fork (the default here) or spawn (the
worker is a fresh interpreter: fork and exec).
"""
import multiprocessing as mp
import os
import sys
import time
import zlib

out_fd, in_fd, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
method = sys.argv[4] if len(sys.argv) > 4 else "fork"
DATA = bytes((i * 7919) % 251 for i in range(1 << 16))


def work(secs):
    # CPU seconds of this process, not wall time: on a busy machine the
    # worker still gets as many samples, it only takes longer.
    end = time.process_time() + secs
    while time.process_time() < end:
        zlib.compress(DATA, 9)


if __name__ == "__main__":
    os.write(out_fd, b"r")
    os.read(in_fd, 1)
    p = mp.get_context(method).Process(target=work, args=(secs,))
    p.start()
    p.join()
    if p.exitcode != 0:
        sys.exit(1)
    os.write(out_fd, b"d")
    os.read(in_fd, 1)
