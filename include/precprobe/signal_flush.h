// Flushing the dump when the process is told to stop (SIGTERM from a scheduler, Ctrl-C).
//
// Automatic: the PrecisionDebugger installs these handlers on its first start() (config key
// "signal_flush", on by default) and removes them when it is destroyed; it never removes
// handlers the program installed itself with install_signal_flush().
//
// install_signal_flush() installs handlers for SIGTERM and SIGINT. The handler only
// write(2)s the signal number to a self-pipe (async-signal-safe) and returns at once: the
// interrupted thread may hold a lock the flush needs (the writer's queue lock, inside
// submit()), so nothing waits inside the handler. A dedicated flusher thread (signals
// blocked in it) closes the current frame of every stream of the started debugger's writer,
// waits until it is on disk, and rewrites meta.json with
// "state": "signalled", "signal": <number> and the writer's counters. That work runs on a
// helper thread the flusher waits for at most `timeout_ms`, so a stuck writer cannot keep
// the process alive. Then the flusher re-delivers the signal (kill(getpid(), sig)) to the
// disposition installed before ours, which it restores: a user handler runs in a real
// signal context; the default disposition ends the process "killed by SIGTERM"/"SIGINT"
// for its parent; an ignored signal stays ignored (ours stays installed). Training goes on
// for the few milliseconds the flush takes; records submitted meanwhile may or may not be
// in the dump, and every frame closed before still reads back.
//
// Threads: call install/uninstall from the controlling thread, not concurrently with each
// other. The flusher holds a shared reference to the writer it flushes, so a debugger
// stopped or destroyed meanwhile is safe; a signal while no debugger is started only
// chains.
#pragma once

namespace precprobe {

/// Installs the SIGTERM and SIGINT handlers and starts the flusher thread (once per
/// process; later calls only update `timeout_ms`). Throws precprobe::Error when
/// sigaction(2) or pipe(2) fails.
void install_signal_flush(int timeout_ms = 2000);

/// Restores the handlers that were installed before install_signal_flush(). The flusher
/// thread stays, idle. Never throws. (After a signal was chained, the previous handler of
/// that signal is already back in place.)
void uninstall_signal_flush() noexcept;

/// Whether our handlers are installed now.
bool signal_flush_installed() noexcept;

/// Number of signals whose flush completed within the timeout (for tests).
unsigned signal_flushes_completed() noexcept;

}  // namespace precprobe
