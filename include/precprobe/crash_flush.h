// Keeping what is complete when the program crashes: a fatal signal (SIGSEGV, SIGBUS,
// SIGFPE, SIGILL, SIGABRT), the program's own fault or one in precprobe or LibTorch.
//
// Automatic: the PrecisionDebugger installs the handlers on its first start() (config key
// "crash_flush", on by default; "crash_flush_timeout_ms") and removes them when it is
// destroyed; it never removes handlers installed with install_crash_flush().
//
// A fatal signal cannot return to the faulting code, so the handler waits, bounded: it first
// writes the crash record `<rank_dir>/crash.json` itself with async-signal-safe calls only
// (open, write, close; the signal, the step, the innermost op the crashing thread was
// running and its thread), wakes a dedicated flusher thread and poll(2)s for its answer at
// most `timeout_ms`. The flusher (not in signal context) emits the records of every op
// that ended, flushes the writer (closing frames) and marks meta.json "state": "crashed".
// When it cannot finish in time (the crash came while a lock it needs was held) the crash
// record is still there. Then the handler restores the disposition installed before it
// (a handler of the program, Python's faulthandler, or the default action) and hands the
// signal on: a fault re-executes and faults again there, a signal sent by a process
// (kill, raise, abort) is raised again; the process dies with the same signal. A second
// fault inside the handler goes straight to the previous disposition. While no debugger is
// started, the handlers only chain. A line on stderr says what was written.
//
// Threads: call install/uninstall from the controlling thread, not concurrently with each
// other. A debugger destroyed on another thread while a crash is handled is not supported.
#pragma once

namespace precprobe {

/// Installs the handlers of SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT (with an alternate
/// signal stack for the calling thread when it has none, so that a stack overflow there is
/// handled) and starts the flusher thread (once per process; later calls only update
/// `timeout_ms`). Throws precprobe::Error when `timeout_ms` is negative or sigaction(2) or
/// pipe(2) fails.
void install_crash_flush(int timeout_ms = 2000);

/// Restores the dispositions installed before install_crash_flush(), where ours is still
/// installed. The flusher thread stays, idle. Never throws.
void uninstall_crash_flush() noexcept;

/// Whether our handlers are installed now.
bool crash_flush_installed() noexcept;

}  // namespace precprobe
