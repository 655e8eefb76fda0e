"""The debugger's life in a Python process: exit without stop(), a debugger collected while
started, Ctrl-C, a Scope left on another thread — each in a child interpreter, which must
exit normally (not crash) with its dump complete."""

import os
import signal
import subprocess
import sys
import threading
import textwrap

import pytest
import torch

import precprobe
from conftest import read_meta, read_stream


def child(code, *args):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=120)


def test_exit_without_stop_leaves_a_stopped_dump(dump_dir):
    r = child("""
        import sys, torch, precprobe
        dbg = precprobe.PrecisionDebugger(dump_path=sys.argv[1], overwrite=True)
        dbg.start(torch.nn.Linear(2, 2))
        torch.nn.Linear(2, 2)(torch.ones(1, 2)).sum().backward()
        dbg.step()
        torch.ones(3).exp()
        """, dump_dir)
    assert r.returncode == 0, r.stderr
    assert read_meta(dump_dir)["state"] == "stopped"
    assert {o["step"] for o in read_stream(dump_dir, "ops")} == {0, 1}


def test_a_started_debugger_collected_stops(dump_dir):
    r = child("""
        import gc, sys, torch, precprobe
        dbg = precprobe.PrecisionDebugger(dump_path=sys.argv[1], overwrite=True)
        dbg.start()
        torch.ones(3).exp()
        del dbg
        gc.collect()
        again = precprobe.PrecisionDebugger(dump_path=sys.argv[1] + "2", overwrite=True)
        again.start()   # the first one is gone: no "already started"
        again.stop()
        print("ok")
        """, dump_dir)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    assert read_meta(dump_dir)["state"] == "stopped"


def test_ctrl_c_is_a_keyboard_interrupt_and_the_dump_is_flushed(dump_dir):
    r = child("""
        import os, signal, sys, time, torch, precprobe
        dbg = precprobe.PrecisionDebugger(dump_path=sys.argv[1], overwrite=True)
        dbg.start()
        torch.ones(3).exp()
        try:
            # The signal may land on one of precprobe's threads, whose handler flushes the
            # dump before it hands the signal on to Python's: it arrives a moment later.
            os.kill(os.getpid(), signal.SIGINT)
            end = time.monotonic() + 20
            while time.monotonic() < end:
                torch.ones(3).neg()
        except KeyboardInterrupt:
            print("interrupted")
        dbg.stop()
        """, dump_dir)
    assert r.returncode == 0, r.stderr
    assert "interrupted" in r.stdout
    assert read_meta(dump_dir)["state"] == "stopped"


def test_a_scope_is_left_on_the_thread_that_entered_it():
    s = precprobe.Scope("outer")
    s.__enter__()
    errors = []

    def other():
        try:
            s.__exit__(None, None, None)
        except precprobe.Error as e:
            errors.append(str(e))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors and "thread" in errors[0]
    assert precprobe.Scope.current_path() == "outer"
    s.__exit__(None, None, None)
    assert precprobe.Scope.current_path() == ""
    with pytest.raises(precprobe.Error, match="already entered"):
        with s:
            s.__enter__()
    assert precprobe.Scope.current_path() == ""


def test_ops_on_other_threads_are_recorded(dump_dir):
    dbg = precprobe.PrecisionDebugger(dump_path=dump_dir, overwrite=True)
    dbg.start()
    t = threading.Thread(target=lambda: torch.ones(4).cos())
    t.start()
    t.join()
    dbg.step()
    dbg.stop()
    cos = [o for o in read_stream(dump_dir, "ops") if o["op"] == "aten::cos"]
    assert len(cos) == 1 and cos[0]["thr"] != 0


def test_calls_from_several_threads_are_serialised(dump_dir):
    """The C++ debugger is driven from one thread at a time: calls from Python threads at
    once wait for each other instead of racing."""
    net = torch.nn.Linear(8, 8)
    dbg = precprobe.PrecisionDebugger(dump_path=dump_dir, overwrite=True)
    dbg.start(net)
    errors = []

    def work(i):
        try:
            for s in range(30):
                dbg.run_step(lambda: net(torch.randn(4, 8)).sum())
                dbg.log_scalar(f"t{i}", s)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dbg.stop()
    assert not errors
    assert dbg.current_step == 90
    assert len([e for e in read_stream(dump_dir, "events") if e["name"].startswith("t")]) == 90
