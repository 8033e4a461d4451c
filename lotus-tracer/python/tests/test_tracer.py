"""Unit tests of the tracer's own code, run without a lotus run (no log
is written: `_core._emit` is replaced where a test reads what would be).
Run by scripts/test.sh:

    .venv/bin/python -m unittest discover -s lotus-tracer/python/tests -t lotus-tracer/python
"""

import concurrent.futures
import os
import threading
import time
import unittest
from unittest import mock

from lotus_trace import _core, _libraries, _loader, _ops


class LoaderSettings(unittest.TestCase):
    """`$LOTUS_LOADER` (what `lotus tune` sets)."""

    def test_the_settings_are_read_as_keyword_arguments(self):
        got = _loader.parse_settings(" workers=2, prefetch=4,persistent=1,pin=0 ")
        self.assertEqual(got["num_workers"], 2)
        self.assertEqual(got["prefetch_factor"], 4)
        self.assertIs(got["persistent_workers"], True)
        self.assertIs(got["pin_memory"], False)

    def test_a_malformed_value_names_the_bad_part(self):
        for bad, says in [
            ("workers", "'workers' is not one of"),
            ("threads=2", "'threads=2' is not one of"),
            ("workers=1,workers=2", "'workers' is given twice"),
            ("persistent=yes", "persistent is 0 or 1"),
        ]:
            with self.assertRaises(ValueError) as e:
                _loader.parse_settings(bad)
            self.assertIn(says, str(e.exception), bad)


class OpSpecs(unittest.TestCase):
    """`$LOTUS_TRACE_OPS` (`lotus trace run --op`)."""

    def test_specs_keep_their_place_and_malformed_ones_are_noted_not_kept(self):
        with mock.patch.object(_core, "note") as note:
            specs = _ops._parse("plain_ops:decode\n  \nno_colon\n__main__:Scale.__call__\n")
        self.assertEqual(
            specs,
            [(0, "plain_ops", "decode", "plain_ops:decode"), (3, "__main__", "Scale.__call__", "__main__:Scale.__call__")],
        )
        note.assert_called_once()
        self.assertIn("no_colon", note.call_args.args[0])


class Names(unittest.TestCase):
    def test_a_name_fits_a_log_line_and_keeps_its_dunders(self):
        self.assertEqual(_core.clean_name("Cls.__call__"), "Cls.__call__")
        self.assertEqual(_core.clean_name(" a,b c\n"), "a_b_c")
        self.assertEqual(_core.clean_name(",,"), "op")


class Tasks(unittest.TestCase):
    """Work handed to a thread pool (`kind=task` spans)."""

    def setUp(self):
        self.lines = []
        patches = [
            mock.patch.object(_core, "_emit", self.lines.append),
            mock.patch.object(_core, "_on", True),
            mock.patch.object(_core, "_original", False),
        ]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)

    def fields(self, line):
        name, start, dur, *rest = line.rstrip("\n").split(",")
        return name, int(start), int(dur), dict(f.split("=", 1) for f in rest)

    def test_a_task_run_on_another_thread_says_who_handed_it_over_and_when(self):
        before = time.time_ns()
        task = _core.task_of(lambda x: x * 2)
        out = []
        t = threading.Thread(target=lambda: out.append(task(21)))
        t.start()
        t.join()
        self.assertEqual(out, [42])
        self.assertEqual(len(self.lines), 1, self.lines)
        name, start, dur, f = self.fields(self.lines[0])
        self.assertEqual(f["kind"], "task")
        self.assertEqual(int(f["by"]), threading.get_native_id())
        self.assertEqual(int(f["tid"]), t.native_id)
        self.assertTrue(before <= int(f["at"]) <= start, (before, f["at"], start))
        self.assertGreaterEqual(dur, 0)

    def test_a_task_run_by_the_thread_that_made_it_is_no_span(self):
        _core.task_of(lambda: None)()
        self.assertEqual(self.lines, [])

    def test_a_task_that_raises_still_writes_its_span_and_raises(self):
        def boom():
            raise KeyError("x")

        task = _core.task_of(boom)
        errors = []

        def run():
            try:
                task()
            except KeyError as e:
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        t.join()
        self.assertEqual(len(errors), 1)
        self.assertEqual(len(self.lines), 1)

    def test_the_original_format_writes_no_tasks(self):
        fn = len
        with mock.patch.object(_core, "_original", True):
            self.assertIs(_core.task_of(fn), fn)

    def test_a_thread_pool_executor_hands_its_callables_over_as_tasks(self):
        class Pool(concurrent.futures.ThreadPoolExecutor):
            pass

        module = mock.Mock(ThreadPoolExecutor=Pool)
        # The patch goes on the class's own `submit`: a subclass of the
        # standard one, so that the real class stays as it is.
        Pool.submit = concurrent.futures.ThreadPoolExecutor.submit
        _libraries._patch_thread_pool(module)
        self.assertTrue(getattr(Pool.submit, "__lotus_trace__", False))
        with Pool(max_workers=1) as pool:
            self.assertEqual(list(pool.map(abs, [-1, -2])), [1, 2])
        self.assertEqual(len(self.lines), 2, self.lines)
        self.assertTrue(all(",kind=task," in line for line in self.lines))
        # Patched once: a second import leaves it as it is.
        patched = Pool.submit
        _libraries._patch_thread_pool(module)
        self.assertIs(Pool.submit, patched)


GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "trace", "golden", "tracer_lines.txt")


class Golden(unittest.TestCase):
    """The lines the tracer writes, pinned: `fixtures/trace/golden/
    tracer_lines.txt` holds what these writers give for fixed inputs, and
    the Rust reader's test (`tests/trace_grammar.rs`) parses the same file
    into the fields each line means. A change on either side fails one of
    the two."""

    def written(self):
        lines = []
        with mock.patch.object(_core, "_emit", lines.append), mock.patch.object(_core._ctx, "tid", ",tid=4243"):
            _core._op_line("Blur", 100, 150, ",cpu=40,hook=3,hook_in=1", 3, 7)
            _core._op_line("Collation", 200, 260, ",cpu=55", 3, None)
            _core._op_line("Decode", 300, 320, "", None, 9)
            _core._op_line("gc", 400, 500, ",cpu=90", None, None)
            lines.append(_core._task_line("crunch", 600, 700, 4244, 4243, 550))
            _core.wait_event(4, 800, 900, True)
        with mock.patch.object(_core, "_emit", lines.append), mock.patch.object(_core._ctx, "tid", ""):
            _core.wait_event(5, 1000, 1100, False)
        return lines

    def test_the_writers_give_the_golden_lines(self):
        with open(GOLDEN) as f:
            golden = [line for line in f if not line.startswith("#")]
        self.assertEqual(self.written(), golden)


if __name__ == "__main__":
    unittest.main()
