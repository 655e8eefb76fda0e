#!/usr/bin/env python3
"""Every relative link and image of the front pages points at something that exists.

  check_links.py [SOURCE_DIR]

Reads README.md, BENCHMARKS.md and docs/*.md. For each link or image whose target is not a
URL (`[text](path)`, `![alt](path)`, `[label]: path`, `<a href>`, `<img src>`), outside code
spans and fenced blocks:
  - the path, relative to the page, must name a file or directory of the source tree;
  - a `#anchor` (alone, or after a .md path) must be the slug of a heading of that page, as
    GitHub makes it: the heading's text without its markup, lower-cased, every character
    that is not a letter, digit, '_', '-' or ' ' dropped, spaces made '-', and '-1', '-2'
    ... added to repeats; or a name given by an HTML `id`/`name` attribute.
Prints each broken link as FILE:LINE: TARGET: why, and exits 1 when there is one.
Standard library only (/usr/bin/python3)."""
import glob
import os
import re
import sys
import unicodedata

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
# [text](target "title") and ![alt](target); the target may hold one level of parentheses.
INLINE_LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]"
                         r"\(\s*(<[^>]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)"
                         r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(<[^>]*>|\S+)")
HTML_ATTR = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HTML_ID = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def strip_code_spans(line):
    """The line with each code span blanked out (same length), so links in code are not read."""
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def heading_text(raw):
    """A heading's text as GitHub renders it: links as their text, no emphasis or code marks."""
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "")
    text = re.sub(r"(\*\*|__)(.+?)\1", r"\2", text)
    text = re.sub(r"(?<![\w*])([*_])(?!\s)(.+?)(?<!\s)\1(?![\w*])", r"\2", text)
    return text.strip()


def slug(text):
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LN" or cat[0] == "M":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


class Page:
    """A markdown page: its anchors and its links (line number, target), code left out."""

    def __init__(self, path):
        self.path = path
        self.anchors = set()
        self.links = []
        counts = {}
        lines = open(path, encoding="utf-8").read().split("\n")
        fence = None
        prev = None
        for n, line in enumerate(lines, 1):
            m = FENCE.match(line)
            if fence:
                if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                    fence = None
                prev = None
                continue
            if m:
                fence = m.group(1)
                prev = None
                continue
            h = HEADING.match(line)
            text = None
            if h:
                text = h.group(2)
            elif prev and prev.strip() and SETEXT.match(line) and not HEADING.match(prev):
                if not prev.lstrip().startswith(("|", "-", "*", ">")) or "=" in line:
                    text = prev.strip()
            if text is not None:
                base = slug(heading_text(text))
                k = counts.get(base, 0)
                counts[base] = k + 1
                self.anchors.add(base if k == 0 else f"{base}-{k}")
            for a in HTML_ID.findall(line):
                self.anchors.add(a)
            plain = strip_code_spans(line)
            for m in INLINE_LINK.finditer(plain):
                self.links.append((n, m.group(2).strip("<>")))
            m = REF_DEF.match(plain)
            if m:
                self.links.append((n, m.group(2).strip("<>")))
            for target in HTML_ATTR.findall(plain):
                self.links.append((n, target))
            prev = line


def is_external(target):
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) is not None or target.startswith("//")


def check(root):
    files = [os.path.join(root, "README.md"), os.path.join(root, "BENCHMARKS.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    pages = {}

    def page(path):
        path = os.path.normpath(path)
        if path not in pages:
            pages[path] = Page(path)
        return pages[path]

    problems = []
    checked = 0
    for f in files:
        if not os.path.exists(f):
            problems.append(f"{os.path.relpath(f, root)}: missing")
            continue
        for n, target in page(f).links:
            if not target or is_external(target):
                continue
            checked += 1
            where = f"{os.path.relpath(f, root)}:{n}: {target}"
            path, _, anchor = target.partition("#")
            path = path.split("?")[0]
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            top = os.path.normpath(root)
            if not dest.startswith(top + os.sep) and dest != top:
                problems.append(f"{where}: points outside the source tree")
                continue
            if not os.path.exists(dest):
                problems.append(f"{where}: no such file or directory")
                continue
            if anchor and dest.endswith(".md") and os.path.isfile(dest):
                if anchor not in page(dest).anchors:
                    problems.append(f"{where}: no heading with the anchor #{anchor} in "
                                    f"{os.path.relpath(dest, root)}")
    return files, checked, problems


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    files, checked, problems = check(root)
    for p in problems:
        print(p)
    print(f"{checked} relative links in {len(files)} pages checked, {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
