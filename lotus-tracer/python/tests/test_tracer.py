"""Unit tests of the tracer's own code, run without a lotus run (no log
is written where a test reads what would be: the process's tracer,
`_core.TRACER`, has its `emit` replaced, or a `Tracer` of the test's own
is given a fake one).
Run by scripts/test.sh:

    .venv/bin/python -m unittest discover -s lotus-tracer/python/tests -t lotus-tracer/python
"""

import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from unittest import mock

import lotus_trace
from lotus_trace import _core, _finer, _libraries, _loader, _ops, _ray


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
            mock.patch.object(_core.TRACER, "emit", self.lines.append),
            mock.patch.object(_core.TRACER, "on", True),
            mock.patch.object(_core.TRACER, "original", False),
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
        with mock.patch.object(_core.TRACER, "original", True):
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
GOLDEN_HEADERS = os.path.join(os.path.dirname(GOLDEN), "tracer_headers.txt")

# The launchers' environments the header's job fields are pinned for
# (GOLDEN_HEADERS, in this order): torchrun across nodes, torchrun's
# default run id, srun alone, torchrun under srun, Ray, none, and numbers
# that are not.
HEADER_ENVS = [
    {"TORCHELASTIC_RUN_ID": "job7", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "GROUP_RANK": "1"},
    {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "localhost", "MASTER_PORT": "41000", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "GROUP_RANK": "0"},
    {"SLURM_JOB_ID": "9001", "SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8", "SLURM_NODEID": "2"},
    {"SLURM_JOB_ID": "9001", "SLURM_STEP_ID": "1", "SLURM_NODEID": "1", "TORCHELASTIC_RUN_ID": "r", "MASTER_ADDR": "n0", "MASTER_PORT": "1", "RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "8", "GROUP_RANK": "1"},
    {"RAY_JOB_ID": "02000000"},
    {},
    {"RANK": "x", "WORLD_SIZE": "", "TORCHELASTIC_RUN_ID": "has space", "MASTER_ADDR": "a,b"},
]


def _burn(ns=2 * _finer.MIN_NS):
    """Runs `ns` of this thread's CPU."""
    t = time.thread_time_ns()
    while time.thread_time_ns() - t < ns:
        pass


def _load(i):
    _burn()
    return i


def _fails(i):
    _burn()
    raise ValueError(i)


def _tiny(i):
    return i


class _Augment:
    def __call__(self, x):
        _burn()
        return x

    def method(self, x):
        _burn()
        return x


class _Heavy:
    def __init__(self, x):
        _burn()


class _Flip:
    """A torchvision transform to the tracer (its class's module): a span
    of every call, tiny ones too."""

    __module__ = "torchvision.transforms.transforms"

    def __call__(self, x):
        return x


_traced_op = lotus_trace.wrap(_load, "TracedLoad")


class _Items:
    """A dataset whose `__getitem__` calls each kind of callee directly."""

    augment = _Augment()
    flip = _Flip()

    def __getitem__(self, i):
        x = _load(i)
        try:
            _fails(i)
        except ValueError:
            pass
        _tiny(i)
        self.augment(x)
        self.augment.method(x)
        _Heavy(x)
        self.flip(x)
        _traced_op(i)
        # sorted's key function runs inside sorted: part of its span.
        sorted(range(3000), key=_load_key)
        return x


def _load_key(v):
    _burn(2_000)
    return -v


class FinerSpans(unittest.TestCase):
    """Spans finer than a dataset's `__getitem__` (`_finer`), on every
    Python: sys.monitoring on 3.12+, sys.setprofile before."""

    def setUp(self):
        self.lines = []
        patches = [
            mock.patch.object(_core.TRACER, "emit", self.lines.append),
            mock.patch.object(_core.TRACER, "on", True),
            mock.patch.object(_core.TRACER, "original", False),
            mock.patch.dict(os.environ, {"LOTUS_TRACE_FINER": "1"}),
        ]
        for p in patches:
            p.start()
            self.addCleanup(p.stop)

    def items(self, ds, n, get=None):
        code = _finer.dataset_code(ds.__getitem__)
        self.assertIsNotNone(code)
        for i in range(n):
            token = _finer.enter(code)
            self.assertIsNotNone(token)
            try:
                (get or ds.__getitem__)(i)
            finally:
                _finer.leave(token)

    def counts(self):
        out = {}
        for line in self.lines:
            name = line.split(",", 1)[0][1:]
            out[name] = out.get(name, 0) + 1
        return out

    def test_each_call_a_dataset_makes_itself_is_a_span_named_as_on_312(self):
        self.items(_Items(), 4)
        self.assertEqual(
            self.counts(),
            {
                "_load": 4,
                "_Augment": 4,
                "_Augment.method": 4,
                "_Heavy": 4,
                "_Flip": 4,  # a torchvision transform: every call
                "TracedLoad": 4,  # lotus's own span, not a finer one too
                "sorted": 4,  # its key function is no span of its own
            },
        )
        for line in self.lines:
            self.assertIn(",kind=op,", line)
            if not line.startswith("S_Flip,"):
                cpu = int(line.rstrip("\n").rsplit("cpu=", 1)[1].split(",")[0])
                self.assertGreaterEqual(cpu, _finer.MIN_NS, line)

    def test_the_calls_of_an_iterator_generator_are_spans_per_item(self):
        def stream():
            for i in range(3):
                yield _load(i) + _tiny(i)

        it = stream()
        code = _finer.dataset_code(it)
        for _ in range(3):
            token = _finer.enter(code)
            try:
                next(it)
            finally:
                _finer.leave(token)
        self.assertEqual(self.counts(), {"_load": 3})

    def test_with_finer_spans_off_no_op_is_watched(self):
        from lotus_trace import _torch

        self.assertTrue(_finer.available())
        with mock.patch.dict(os.environ, {"LOTUS_TRACE_FINER": "0"}), mock.patch.object(_ops, "note_finer") as note:
            self.assertFalse(_finer.available())
            # The DataLoader hooks' code to watch: none, and lotus is asked
            # to say how to see inside the dataset.
            self.assertIsNone(_torch._finer_code(_Items().__getitem__))
        note.assert_called_once()

    @unittest.skipIf(sys.version_info >= (3, 12), "sys.monitoring's: no profile function")
    def test_a_profile_function_of_the_job_is_called_meanwhile_and_put_back(self):
        seen = []

        def theirs(frame, event, arg):
            seen.append(event)

        sys.setprofile(theirs)
        try:
            self.items(_Items(), 2)
            now = sys.getprofile()
        finally:
            sys.setprofile(None)
        self.assertIs(now, theirs)
        self.assertIn("c_call", seen)
        self.assertEqual(self.counts().get("_load"), 2)

    @unittest.skipIf(sys.version_info >= (3, 12), "sys.monitoring's: no profile function")
    def test_the_profile_function_is_only_set_while_the_dataset_runs(self):
        self.assertIsNone(sys.getprofile())
        code = _finer.dataset_code(_Items().__getitem__)
        token = _finer.enter(code)
        self.assertIsNotNone(sys.getprofile())
        _finer.leave(token)
        self.assertIsNone(sys.getprofile())
        # A dataset that raised: put back all the same (its callee's span
        # not written).
        with self.assertRaises(ValueError):
            token = _finer.enter(_finer.dataset_code(_fails))
            try:
                _fails(1)
            finally:
                _finer.leave(token)
        self.assertIsNone(sys.getprofile())
        self.assertEqual(self.lines, [])

    @unittest.skipIf(sys.version_info >= (3, 12), "sys.monitoring's: no profile function")
    def test_inside_a_callable_lotus_writes_a_span_of_the_profile_function_is_set_aside(self):
        inside = []

        def seen(x):
            inside.append(sys.getprofile())
            _burn()
            return x

        wrapped = lotus_trace.wrap(seen, "Wrapped")

        class Data:
            def __getitem__(self, i):
                before = sys.getprofile()
                wrapped(i)
                after = sys.getprofile()
                inside.append((before is not None, after is before))
                return _load(i)

        self.items(Data(), 2)
        self.assertEqual(inside, [None, (True, True)] * 2)
        # The dataset's calls after it are still seen.
        self.assertEqual(self.counts(), {"Wrapped": 2, "_load": 2})

    @unittest.skipIf(sys.version_info >= (3, 12), "sys.monitoring's: no profile function")
    def test_a_profiler_set_from_c_keeps_finer_spans_out_and_stays(self):
        import cProfile

        prof = cProfile.Profile()
        notes = []
        with mock.patch.object(_core, "note", notes.append), mock.patch.object(_finer._S, "busy_noted", False):
            prof.enable()
            try:
                token = _finer.enter(_finer.dataset_code(_Items().__getitem__))
                _Items()[0]
                _finer.leave(token)
                still = sys.getprofile()
            finally:
                prof.disable()
        self.assertIsNone(token)
        self.assertIs(still, prof)
        self.assertEqual(self.counts(), {"TracedLoad": 1})
        self.assertEqual(len(notes), 1, notes)
        self.assertIn("a profiler set from C", notes[0])


class RayUdfs(unittest.TestCase):
    """Ray Data's UDFs wrapped (`_ray._traced_udf`) stay what Ray checks
    them for (a function of the same name, a generator function, a class
    of the same name), and each call, or step, is a span of the operator."""

    def setUp(self):
        self.spans = []

        def call_op(name, fn, *args, **kwargs):
            self.spans.append(name)
            return fn(*args, **kwargs)

        for p in (
            mock.patch.object(_core, "call_op", call_op),
            mock.patch.object(_core, "set_role", lambda role: None),
            mock.patch.object(_ray._T, "on", True),
        ):
            p.start()
            self.addCleanup(p.stop)

    def test_a_function_a_generator_and_a_class_keep_their_shape(self):
        import inspect

        def parse(row):
            return row + 1

        def explode(row):
            yield row
            yield row

        class Augment:
            def __call__(self, batch):
                return batch * 2

        f = _ray._traced_udf(parse, "Map(parse)")
        self.assertTrue(inspect.isfunction(f))
        self.assertEqual(f.__name__, "parse")
        self.assertEqual(f(1), 2)
        g = _ray._traced_udf(explode, "FlatMap(explode)")
        self.assertTrue(inspect.isgeneratorfunction(g))
        self.assertEqual(list(g(5)), [5, 5])
        c = _ray._traced_udf(Augment, "MapBatches(Augment)")
        self.assertTrue(inspect.isclass(c) and issubclass(c, Augment))
        self.assertEqual(c.__name__, "Augment")
        self.assertEqual(c()(3), 6)
        self.assertEqual(self.spans, ["Map(parse)", "FlatMap(explode)", "FlatMap(explode)", "FlatMap(explode)", "MapBatches(Augment)"])
        # Wrapped once only.
        self.assertIs(_ray._traced_udf(f, "Map(parse)"), f)
        self.assertEqual(_ray._udf_name(parse), "parse")
        self.assertEqual(_ray._udf_name(Augment), "Augment")
        self.assertEqual(_ray._udf_name(Augment()), "Augment")

    def test_each_sinks_own_write_is_a_span_those_defined_later_too(self):
        import types

        class Datasink:
            def write(self, blocks, ctx):
                return "base"

            def get_name(self):
                return type(self).__name__.removesuffix("Datasink")

        class JSONDatasink(Datasink):
            def write(self, blocks, ctx):
                return "json"

        mod = types.SimpleNamespace(Datasink=Datasink)
        _ray._patch_datasink(mod)

        class MineDatasink(Datasink):  # a user's, defined after
            def write(self, blocks, ctx):
                return "mine"

        class Plain(Datasink):  # no write of its own
            pass

        self.assertEqual([JSONDatasink().write([], None), MineDatasink().write([], None), Plain().write([], None)], ["json", "mine", "base"])
        self.assertEqual(self.spans, ["WriteJSON", "WriteMine", "WritePlain"])
        _ray._patch_datasink(mod)  # once only
        JSONDatasink().write([], None)
        self.assertEqual(self.spans[-1:], ["WriteJSON"])
        self.assertEqual(len(self.spans), 4)


class Golden(unittest.TestCase):
    """The lines the tracer writes, pinned: `fixtures/trace/golden/
    tracer_lines.txt` holds what these writers give for fixed inputs, and
    the Rust reader's test (`tests/trace_grammar.rs`) parses the same file
    into the fields each line means. A change on either side fails one of
    the two."""

    def written(self):
        lines = []
        tracer = _core.Tracer(emit=lines.append)
        tracer.ctx.tid = ",tid=4243"
        tracer._op_line("Blur", 100, 150, ",cpu=40,hook=3,hook_in=1", 3, 7)
        tracer._op_line("Collation", 200, 260, ",cpu=55", 3, None)
        tracer._op_line("Decode", 300, 320, "", None, 9)
        tracer._op_line("gc", 400, 500, ",cpu=90", None, None)
        lines.append(_core._task_line("crunch", 600, 700, 4244, 4243, 550))
        tracer.wait_event(4, 800, 900, True)
        tracer.ctx.tid = ""
        tracer.wait_event(5, 1000, 1100, False)
        return lines

    def test_the_header_gives_the_golden_job_fields(self):
        with open(GOLDEN_HEADERS) as f:
            golden = [line.rstrip("\n") for line in f if not line.startswith("#")]
        got = []
        for env in HEADER_ENVS:
            e = _core.job_fields(env)
            got.append(f"rank={e['rank']} local_rank={e['local_rank']} world_size={e['world_size']} node={e['node']} job={e['job']}")
        self.assertEqual(got, golden)
        # And the header carries them, as written.
        tracer = _core.Tracer(emit=lambda line: None)
        with mock.patch.dict(os.environ, HEADER_ENVS[0], clear=True):
            header = tracer._header()
        self.assertIn(" " + golden[0] + " ", header)

    def test_the_writers_give_the_golden_lines(self):
        with open(GOLDEN) as f:
            golden = [line for line in f if not line.startswith("#")]
        self.assertEqual(self.written(), golden)


class TracerState(unittest.TestCase):
    """The tracer is an object: what it keeps is its own (`_core.Tracer`);
    the process's is `_core.TRACER`."""

    def test_two_tracers_write_to_their_own_emitters(self):
        a, b = [], []
        one, two = _core.Tracer(emit=a.append), _core.Tracer(emit=b.append)
        one.on = two.on = True
        one.ctx.tid = two.ctx.tid = ""
        with _core.BatchSpan(7, tracer=one):
            one.op_event("Decode", one.op_begin("Decode"), time.time_ns())
            two.op_event("Blur", two.op_begin("Blur"), time.time_ns())
        self.assertEqual([line.split(",")[0] for line in a], ["SDecode", "SFetch", "SBatch"])
        self.assertIn(",batch=7,", a[0])
        # The batch is `one`'s context, not `two`'s.
        self.assertEqual(len(b), 1)
        self.assertTrue(b[0].startswith("SBlur,"), b)
        self.assertNotIn("batch=", b[0])
        self.assertIsNone(two.ctx.batch)
        # Nothing went to the process's tracer.
        self.assertIsNot(_core.TRACER.emit, a.append)

    def test_names_notes_and_formats_are_per_tracer(self):
        one, two = _core.Tracer(emit=[].append), _core.Tracer(emit=[].append)

        class A:
            pass

        class B:
            pass

        self.assertEqual(one.claim_name(A, "Same", "m.Same"), "Same")
        self.assertEqual(one.claim_name(B, "Same", "m.Same"), "m.Same")
        # `two` gave out no name yet: the short one is free there.
        self.assertEqual(two.claim_name(B, "Same", "m.Same"), "Same")
        one.original = True
        self.assertIs(one.task_of(len), len)
        self.assertIsNot(two.task_of(len), len)
        one.notes_seen.add("said")
        self.assertNotIn("said", two.notes_seen)

    def test_the_environment_switches_are_read_into_the_tracer(self):
        env = {
            "LOTUS_TRACE_FORMAT": "original",
            "LOTUS_TRACE_RUN": "run 7",
            "LOTUS_TRACE_STATUS": "/status",
            "LOTUS_TRACE_ITT": "collect",
            "LOTUS_TRACE_GC": "1",
            "LOTUS_TRACE_PARENT": "1234",
        }
        tracer, other = _core.Tracer(), _core.Tracer()
        with mock.patch.dict(os.environ, env):
            tracer.read_env()
        self.assertIs(tracer.original, True)
        self.assertEqual(tracer.run_id, "run_7")
        self.assertEqual(tracer.status_dir, "/status")
        self.assertIs(tracer.itt_collect, True)
        self.assertIs(tracer.gc_spans, True)
        self.assertIs(tracer.first, False)
        # Read into that tracer only.
        self.assertEqual((other.original, other.run_id, other.status_dir), (False, None, None))
        self.assertEqual((other.itt_collect, other.gc_spans, other.first), (False, False, True))
        with mock.patch.dict(os.environ, {k: "" for k in env}):
            tracer.read_env()
        self.assertEqual((tracer.original, tracer.run_id, tracer.status_dir), (False, None, None))
        self.assertEqual((tracer.itt_collect, tracer.gc_spans, tracer.first), (False, False, True))

    def test_a_forked_child_starts_afresh_and_opens_its_own_log(self):
        tracer = _tracer_with_log(self)
        tracer.emit("SParent,1,1,kind=op\n")
        tracer.note("the parent's note")
        tracer.ctx.batch = 3
        parent_log, parent_fd = tracer.path, tracer.fd
        self.assertIsNotNone(tracer.mm)
        # What os.fork() runs around the fork (`_install_process_hooks`),
        # the child's side; LOTUS_TRACE_LOTUS unset: no watch thread.
        with mock.patch.dict(os.environ, {"LOTUS_TRACE_LOTUS": ""}):
            tracer._before_fork()
            tracer._after_fork_child()
        self.assertTrue(tracer.lock.acquire(blocking=False), "the child has a lock of its own")
        tracer.lock.release()
        self.assertEqual((tracer.fd, tracer.path, tracer.mm, tracer.role), (None, None, None, None))
        self.assertIs(tracer.write, _core._no_mapping)
        self.assertEqual((tracer.end, tracer.clock_at, tracer.buf), (0, -1, []))
        self.assertIs(tracer.child_setup, True)
        self.assertEqual(tracer.notes_seen, set())
        self.assertIsNone(tracer.ctx.batch)
        self.assertEqual(tracer.pid, os.getpid())
        with self.assertRaises(OSError):
            os.fstat(parent_fd)  # closed in the child
        # The child's first line opens a log of its own (this process's pid
        # name is the "parent's" here: the next free one).
        tracer.emit("SChild,2,1,kind=op\n")
        self.assertIs(tracer.child_setup, False)
        self.assertNotEqual(tracer.path, parent_log)
        self.assertEqual(os.path.basename(tracer.path), f"lotus.1_main_pid_{os.getpid()}")
        tracer._close()
        os.close(tracer.fd)
        with open(parent_log, "rb") as f:
            parent = f.read().rstrip(b"\0").decode()
        with open(tracer.path) as f:
            child = f.read()
        self.assertIn("SParent,1,1,kind=op\n", parent)
        self.assertNotIn("SChild", parent)
        self.assertTrue(child.startswith("#lotus-trace v1 role=main"), child)
        self.assertIn("SChild,2,1,kind=op\n", child)
        self.assertNotIn("SParent", child)


def _tracer_with_log(test):
    """A tracer switched on, writing its log into a temporary folder that
    `test` removes: the main thread's spans, no tid."""
    folder = tempfile.mkdtemp(prefix="lotus-trace-test-")
    test.addCleanup(shutil.rmtree, folder, True)
    tracer = _core.Tracer()
    tracer.dir = folder
    tracer.on = True
    tracer.ctx.tid = ""
    return tracer


def _read_log(path):
    with open(path, "rb") as f:
        return f.read().rstrip(b"\0").decode()


# A process traced with gc spans whose forked child collects before the
# tracer's at-fork handler runs (in a handler registered before `enable`,
# as threading's is), once the parent has written lines after the fork.
_FORK_RACE = """
import gc, os, sys
import lotus_trace
# No collection of the parent's own (an allocation count reached) in its
# log: the child's explicit one is the one looked for.
gc.disable()
r, w = os.pipe()
def child_first():
    os.read(r, 1)
    gc.collect()
os.register_at_fork(after_in_child=child_first)
os.environ["LOTUS_TRACE_GC"] = "1"
lotus_trace.enable(sys.argv[1])
with lotus_trace.span("ParentBefore"):
    pass
pid = os.fork()
if pid == 0:
    with lotus_trace.span("ChildOp"):
        pass
    lotus_trace.flush()
    os._exit(0)
for i in range(3):
    with lotus_trace.span(f"ParentAfter{i}"):
        pass
os.write(w, b"x")
os.waitpid(pid, 0)
lotus_trace.disable()
print(os.getpid(), pid)
"""


class GcSpans(unittest.TestCase):
    """Collections as `gc` op spans ($LOTUS_TRACE_GC=1): held back where the
    log cannot take them, and each in its own process's log."""

    def tracer_with_log(self):
        return _tracer_with_log(self)

    def collect(self, tracer, generation=2):
        """What `gc.callbacks` calls around a collection."""
        tracer._gc_callback("start", {"generation": generation})
        tracer._gc_callback("stop", {"generation": generation, "collected": 0, "uncollectable": 0})

    def test_spans_held_before_the_log_exists_follow_its_header(self):
        tracer = self.tracer_with_log()
        for n in range(_core._GC_PENDING_MAX + 2):
            tracer._emit_from_gc(f"Sgc,{n},1,kind=op,gen=1,cpu=1\n".encode())
        self.assertEqual(len(tracer.gc_pending), _core._GC_PENDING_MAX)
        # The log's first line writes them, and says how many did not fit:
        # none is left for a child forked before the next batch or flush.
        tracer.emit("SFirst,100,1,kind=op\n")
        self.assertEqual(tracer.gc_pending, [])
        tracer._close()
        lines = _read_log(tracer.path).splitlines()
        self.assertTrue(lines[0].startswith("#lotus-trace v1 role=main"), lines[0])
        self.assertEqual(lines[1 : 1 + _core._GC_PENDING_MAX], [f"Sgc,{n},1,kind=op,gen=1,cpu=1" for n in range(_core._GC_PENDING_MAX)])
        self.assertIn(f"2 gc spans not written: more than {_core._GC_PENDING_MAX}", lines[1 + _core._GC_PENDING_MAX])
        self.assertEqual(lines[2 + _core._GC_PENDING_MAX], "SFirst,100,1,kind=op")

    def test_a_child_collecting_before_its_fork_handler_keeps_its_span_for_its_own_log(self):
        tracer = self.tracer_with_log()
        tracer.emit("SParent,1,1,kind=op\n")
        parent_log = tracer.path
        self.assertIsNotNone(tracer.mm)
        # A span the parent holds back (its log's mapping was growing), and
        # its context: a batch, a thread id.
        tracer.gc_pending.append(b"Sgc,5,1,kind=op,gen=1,cpu=1\n")
        tracer.ctx.batch = 9
        tracer.ctx.tid = ",tid=4243"
        # The fork: this process is another pid now, the tracer's state still
        # the parent's until `_after_fork_child`, and a collection comes first.
        child_pid = os.getpid() + 100_000
        with mock.patch.object(os, "getpid", return_value=child_pid):
            self.collect(tracer)
            self.assertEqual(len(tracer.gc_pending), 1, tracer.gc_pending)
            held = tracer.gc_pending[0].decode()
            with mock.patch.dict(os.environ, {"LOTUS_TRACE_LOTUS": ""}):
                tracer._before_fork()
                tracer._after_fork_child()
            self.assertEqual(tracer.gc_pending, [held.encode()], "the child's own span is kept")
            tracer.emit("SChild,2,1,kind=op\n")
            tracer._close()
        os.close(tracer.fd)
        self.assertTrue(held.startswith("Sgc,"), held)
        self.assertIn(",kind=op,gen=2,cpu=", held)
        self.assertNotIn("batch=", held)  # the parent's context, not the child's
        self.assertNotIn("tid=", held)  # the child's main thread
        self.assertEqual(os.path.basename(tracer.path), f"lotus_main_pid_{child_pid}")
        parent, child = _read_log(parent_log), _read_log(tracer.path)
        self.assertNotIn("Sgc", parent)
        self.assertIn(held, child)
        self.assertNotIn("Sgc,5,", child)

    def test_a_forked_child_collecting_before_the_tracer_knows_of_the_fork(self):
        folder = tempfile.mkdtemp(prefix="lotus-trace-test-")
        self.addCleanup(shutil.rmtree, folder, True)
        package = os.path.dirname(os.path.dirname(_core.__file__))
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOTUS_")}
        env["PYTHONPATH"] = package
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        out = subprocess.run([sys.executable, "-c", _FORK_RACE, folder], check=False, env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        parent_pid, child_pid = out.stdout.split()
        parent = _read_log(os.path.join(folder, f"lotus_main_pid_{parent_pid}"))
        child = _read_log(os.path.join(folder, f"lotus_main_pid_{child_pid}"))
        # The parent's lines whole, each once; the child's collection in its
        # own log, none in the parent's (their mapping is shared).
        names = [line.split(",")[0] for line in parent.splitlines() if not line.startswith("#")]
        self.assertEqual(names, ["SParentBefore", "SParentAfter0", "SParentAfter1", "SParentAfter2"], parent)
        self.assertEqual([line.split(",")[0] for line in child.splitlines() if not line.startswith("#")], ["Sgc", "SChildOp"], child)


if __name__ == "__main__":
    unittest.main()
