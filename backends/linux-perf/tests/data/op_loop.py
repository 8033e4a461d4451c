"""Loops a fixture op (setup() once, then op(arg)) for SECONDS of this
process's CPU time: the Python target of the symbolization comparison with
perf. usage: op_loop.py OP_FILE SECONDS"""

import importlib.util
import sys
import time

spec = importlib.util.spec_from_file_location("op_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
arg = module.setup() if hasattr(module, "setup") else None
end = time.process_time() + float(sys.argv[2])
while time.process_time() < end:
    module.op(arg)
