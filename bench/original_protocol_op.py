"""The original Lotus tool's per-op protocol, for the benchmark.

One process per run: import the op, call setup(), then five op calls, each
after a one-second sleep, with the profiler window around the last call
only (the original scripts' `time.sleep(1)` and `if i == 4: itt.resume()`).
The window is switched through `perf record --control fifo:CTL,ACK`.

usage: python original_protocol_op.py OP_FILE CTL_FIFO ACK_FIFO
"""

import importlib.util
import os
import sys
import time


def main():
    op_file, ctl_path, ack_path = sys.argv[1:4]
    op_dir = os.path.dirname(os.path.abspath(op_file))
    os.chdir(op_dir)
    sys.path.insert(0, op_dir)
    spec = importlib.util.spec_from_file_location("op_under_test", op_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = mod.setup() if hasattr(mod, "setup") else None
    ctl = open(ctl_path, "w")
    ack = open(ack_path, "r")
    for i in range(5):
        time.sleep(1)
        if i == 4:
            ctl.write("enable\n")
            ctl.flush()
            ack.readline()
        mod.op(x)
        if i == 4:
            ctl.write("disable\n")
            ctl.flush()
            ack.readline()


if __name__ == "__main__":
    main()
