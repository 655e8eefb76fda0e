#!/usr/bin/env python3
"""The output the docs show is the output of the tool as built.

  check_cli_doc.py SOURCE_DIR PRECPROBE [MAKE_ANOMALY_DUMP]

1. docs/cli.md is what scripts/render_cli_doc.py makes of docs/cli.md.in with this
   PRECPROBE (rendered in a scratch copy; the source tree is not written).
2. Every block of README.md and docs/cli.md.in written by hand that shows `$ precprobe ...`
   followed by its output (and `$ echo $?` followed by the exit status) is run, stdout and
   stderr together, in a scratch directory where tests/ is the source tree's and `dump` is
   the hand-made on_anomaly dump of tests/cli/anomaly_dump.h (MAKE_ANOMALY_DUMP writes it);
   the scratch directory's path is shown as /home/me. A block's commands after the first
   one that is not precprobe's (building the program `precprobe repro` wrote needs LibTorch:
   the repro_e2e test does that) are listed, not run.
3. A block of README.md or docs/*.md preceded by the line `<!-- copied from docs/cli.md -->`
   is, line for line, part of one of docs/cli.md's blocks (a last line "..." stands for the
   rest of the output).
Prints what differs and exits 1 when anything does. Standard library only."""
import difflib
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
COPIED = "<!-- copied from docs/cli.md -->"
HOME = "/home/me"


def blocks(path):
    """(first line number, lines, the line before the block) of each fenced block."""
    out = []
    lines = open(path, encoding="utf-8").read().split("\n")
    fence, start, body, before = None, 0, [], ""
    for n, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence, start, body = m.group(1), n + 1, []
                before = next((l for l in reversed(lines[: n - 1]) if l.strip()), "")
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and \
                not line.strip()[len(m.group(1)):].strip():
            out.append((start, body, before.strip()))
            fence = None
        else:
            body.append(line)
    return out


def normalise(text):
    lines = [l.rstrip() for l in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def diff(want, got, label):
    return "\n".join(difflib.unified_diff(want, got, f"{label} (the doc)", f"{label} (the tool)",
                                          lineterm="", n=2))


def check_rendered(root, exe, scratch, problems):
    copy = os.path.join(scratch, "render")
    os.makedirs(os.path.join(copy, "scripts"))
    os.makedirs(os.path.join(copy, "docs"))
    shutil.copy(os.path.join(root, "scripts", "render_cli_doc.py"), os.path.join(copy, "scripts"))
    shutil.copy(os.path.join(root, "docs", "cli.md.in"), os.path.join(copy, "docs"))
    os.symlink(os.path.join(root, "tests"), os.path.join(copy, "tests"))
    p = subprocess.run([sys.executable, os.path.join(copy, "scripts", "render_cli_doc.py"), exe],
                       capture_output=True, text=True)
    if p.returncode != 0:
        problems.append(f"scripts/render_cli_doc.py failed ({p.returncode}):\n{p.stderr}")
        return
    want = open(os.path.join(root, "docs", "cli.md"), encoding="utf-8").read().split("\n")
    got = open(os.path.join(copy, "docs", "cli.md"), encoding="utf-8").read().split("\n")
    if want != got:
        problems.append("docs/cli.md is not what scripts/render_cli_doc.py makes of "
                        "docs/cli.md.in with this precprobe (run it: scripts/render_cli_doc.py "
                        "build/bin/precprobe):\n" + "\n".join(diff(want, got, "docs/cli.md")
                                                             .split("\n")[:80]))


def commands(body):
    """The block as [(command, output lines)] for each `$ ` line."""
    out = []
    for line in body:
        if line.startswith("$ "):
            out.append((line[2:].strip(), []))
        elif out:
            out[-1][1].append(line)
    return out


def check_blocks(root, exe, workdir, pages, problems, notes):
    ran = 0
    for page in pages:
        rel = os.path.relpath(page, root)
        for start, body, _ in blocks(page):
            cmds = commands(body)
            if not cmds or not cmds[0][0].startswith("precprobe "):
                continue
            last = None
            for i, (cmd, shown) in enumerate(cmds):
                where = f"{rel}:{start}: $ {cmd}"
                if cmd == "echo $?":
                    if last is None:
                        problems.append(f"{where}: no precprobe command before it")
                    elif normalise("\n".join(shown)) != [str(last)]:
                        problems.append(f"{where}: the doc says {' '.join(shown).strip()}, "
                                        f"the tool exited {last}")
                    continue
                if not cmd.startswith("precprobe "):
                    notes.append(f"{rel}:{start}: not run here: "
                                 + "; ".join(c for c, _ in cmds[i:]))
                    break
                p = subprocess.run([exe] + cmd.split()[1:], cwd=workdir, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, env=dict(os.environ, NO_COLOR="1"),
                                   text=True)
                ran += 1
                last = p.returncode
                got = normalise(p.stdout.replace(workdir, HOME))
                want = normalise("\n".join(shown))
                if got != want:
                    problems.append(f"{where}: the output shown is not the tool's:\n"
                                    + diff(want, got, cmd))
    return ran


def check_copies(root, pages, problems):
    cli_md = os.path.join(root, "docs", "cli.md")
    cli = [normalise("\n".join(body)) for _, body, _ in blocks(cli_md)]
    copies = 0
    for page in pages:
        rel = os.path.relpath(page, root)
        for start, body, before in blocks(page):
            if before != COPIED:
                continue
            copies += 1
            want = normalise("\n".join(body))
            if want and want[-1] == "...":  # the first lines of a longer output
                want.pop()
            if not any(want == b[i:i + len(want)] for b in cli for i in range(len(b))):
                problems.append(f"{rel}:{start}: marked as copied from docs/cli.md, but no block "
                                "of docs/cli.md holds these lines (copy it again)")
    return copies


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    root = os.path.abspath(sys.argv[1])
    exe = os.path.abspath(sys.argv[2])
    make_dump = sys.argv[3] if len(sys.argv) > 3 else None
    problems, notes = [], []
    scratch = tempfile.mkdtemp(prefix="precprobe_docs_")
    try:
        check_rendered(root, exe, scratch, problems)
        work = os.path.join(scratch, "work")
        os.makedirs(work)
        os.symlink(os.path.join(root, "tests"), os.path.join(work, "tests"))
        if make_dump:
            subprocess.run([make_dump, os.path.join(work, "dump")], check=True)
        by_hand = [os.path.join(root, "README.md"), os.path.join(root, "docs", "cli.md.in")]
        ran = check_blocks(root, exe, work, by_hand, problems, notes)
        pages = [os.path.join(root, "README.md")]
        pages += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
        copies = check_copies(root, pages, problems)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for n in notes:
        print(n)
    for p in problems:
        print(p)
    print(f"docs/cli.md rendered again; {ran} commands written by hand run; {copies} copied "
          f"blocks found in docs/cli.md; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
