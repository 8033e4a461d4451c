"""A script looping one op for a given CPU time, for `perf record` (the
alternative to `lotus map` a user would write by hand): import the op,
setup(), three warm-up calls, then op calls until the process has used
CPU_S seconds of CPU time.

usage: python loop_op.py OP_FILE CPU_S
"""

import importlib.util
import os
import sys
import time


def main():
    op_file, cpu_s = sys.argv[1], float(sys.argv[2])
    op_dir = os.path.dirname(os.path.abspath(op_file))
    os.chdir(op_dir)
    sys.path.insert(0, op_dir)
    spec = importlib.util.spec_from_file_location("op_under_test", op_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x = mod.setup() if hasattr(mod, "setup") else None
    for _ in range(3):
        mod.op(x)
    end = time.process_time() + cpu_s
    while time.process_time() < end:
        mod.op(x)


if __name__ == "__main__":
    main()
