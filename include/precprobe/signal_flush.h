// Flushing the dump when the process is told to stop (SIGTERM from a scheduler, Ctrl-C).
//
// install_signal_flush() installs handlers for SIGTERM and SIGINT. On a signal the handler
// wakes a dedicated flusher thread through a self-pipe (write(2) is async-signal-safe; the
// flushing itself — locks, allocation, zstd, file I/O — is not, so it never runs in the
// handler), waits at most `timeout_ms` for it (poll(2)), then chains: to the handler that
// was installed before (called as it would have been), or, when that was the default
// disposition, by restoring the default and re-raising, so the process still ends "killed
// by SIGTERM" / "killed by SIGINT" for its parent. An ignored signal stays ignored.
//
// The flusher closes the current frame of every stream of the started debugger's writer
// (PrecisionDebugger::current()), waits until it is on disk, and rewrites meta.json with
// "state": "signalled", "signal": <number> and the writer's counters.
//
// The wait is bounded because the signal may interrupt a thread that holds the writer's
// queue lock (inside submit()): the flusher then cannot finish, and after `timeout_ms` the
// handler chains anyway; every frame closed before the signal still reads back.
//
// Threads: call install/uninstall from the controlling thread, not concurrently with each
// other. The flusher must not race a debugger being destroyed: stop the debugger before
// uninstalling, and install after start().
#pragma once

namespace precprobe {

/// Installs the SIGTERM and SIGINT handlers and starts the flusher thread (once per
/// process; later calls only update `timeout_ms`). Throws precprobe::Error when
/// sigaction(2) or pipe(2) fails.
void install_signal_flush(int timeout_ms = 2000);

/// Restores the handlers that were installed before install_signal_flush(). The flusher
/// thread stays, idle. Never throws.
void uninstall_signal_flush() noexcept;

/// Number of signals whose flush completed within the timeout (for tests).
unsigned signal_flushes_completed() noexcept;

}  // namespace precprobe
