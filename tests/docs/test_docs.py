"""The documents a newcomer reads: README.md stays short, and every relative
link of README.md, docs/*.md and deploy/README.md leads somewhere, to a file
or folder of the checkout and, with a #anchor, to a heading of that file by
GitHub's anchor rule.

    python3 -m unittest -v test_docs    # in tests/docs; ctest docs_links
"""

import os
import re
import tempfile
import unittest

REPO = os.path.normpath(os.environ.get(
    "JOADERFS_SOURCE_DIR",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")))

README_MAX_LINES = 300

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target up to whitespace or ')'.
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"(`+).*?\1", re.DOTALL)


def prose_lines(text):
    """(line number, line) of the text outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def paragraphs(text):
    """(first line number, text) of each paragraph outside fenced code
    blocks: a link's text, like a code span, may run over a line break."""
    start, lines = None, []
    for number, line in prose_lines(text):
        if line.strip() and start is not None and number == start + len(lines):
            lines.append(line)
            continue
        if lines:
            yield start, "\n".join(lines)
        start, lines = (number, [line]) if line.strip() else (None, [])
    if lines:
        yield start, "\n".join(lines)


def anchor(heading):
    """GitHub's anchor of a heading's text: the markup gone, lower case,
    every character but letters, digits, spaces, '-' and '_' dropped, each
    space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_|_(?!\w)", "", text)  # _emphasis_, not snake_case
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text):
    """Every heading's anchor, with GitHub's -1, -2 ... for repeats."""
    seen = {}
    out = set()
    for _, line in prose_lines(text):
        m = _HEADING.match(line)
        if not m:
            continue
        base = anchor(m.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(text):
    """(line number, target) of each markdown link outside code."""
    for start, para in paragraphs(text):
        # Code spans blanked, their line breaks kept for the line numbers.
        para = _CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), para)
        for m in _LINK.finditer(para):
            yield start + para.count("\n", 0, m.start()), m.group(1)


def broken_links(path, root):
    """One message per relative link of the markdown file `path` whose file
    or heading does not exist under `root`."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    where = os.path.relpath(path, root)
    problems = []
    for number, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
            continue
        file_part, _, fragment = target.partition("#")
        dest = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                if file_part else path)
        if not os.path.realpath(dest).startswith(os.path.realpath(root) + os.sep):
            problems.append(f"{where}:{number}: {target}: outside the checkout")
        elif not os.path.exists(dest):
            problems.append(f"{where}:{number}: {target}: no such file")
        elif fragment:
            if not dest.endswith(".md"):
                problems.append(f"{where}:{number}: {target}: an anchor into a "
                                f"file that is not markdown")
                continue
            with open(dest, encoding="utf-8") as f:
                if fragment not in anchors(f.read()):
                    problems.append(f"{where}:{number}: {target}: no heading "
                                    f"#{fragment} in {os.path.relpath(dest, root)}")
    return problems


def documents(root):
    """README.md, docs/*.md and deploy/README.md of the checkout at root."""
    paths = [os.path.join(root, "README.md"),
             os.path.join(root, "deploy", "README.md")]
    docs = os.path.join(root, "docs")
    paths += sorted(os.path.join(docs, name) for name in os.listdir(docs)
                    if name.endswith(".md"))
    return [p for p in paths if os.path.exists(p)]


class AnchorRuleTest(unittest.TestCase):
    """The anchors GitHub makes, for headings these documents have."""

    def test_github_anchor_rule(self):
        cases = {
            "Crashes and reruns": "crashes-and-reruns",
            "Decode once at scale (issue 8)": "decode-once-at-scale-issue-8",
            "The client's cost per sample": "the-clients-cost-per-sample",
            "With a store (`--store rclone`, the default)":
                "with-a-store---store-rclone-the-default",
            "2.4 The stream `/jobs/<id>/next`": "24-the-stream-jobsidnext",
            "`max_unread_per_user` and snake_case": "max_unread_per_user-and-snake_case",
            "[joaderfs(8)](man/joaderfs.8) options": "joaderfs8-options",
        }
        for heading, expected in cases.items():
            self.assertEqual(anchor(heading), expected, heading)

    def test_repeated_headings_are_numbered(self):
        self.assertEqual(anchors("# A\n## A\n```\n# A\n```\n### A\n"),
                         {"a", "a-1", "a-2"})


class CheckerTest(unittest.TestCase):
    """The checker finds what it is for, on a tree of its own."""

    def test_finds_missing_files_and_headings(self):
        with tempfile.TemporaryDirectory() as root:
            os.mkdir(os.path.join(root, "docs"))
            with open(os.path.join(root, "docs", "guide.md"), "w") as f:
                f.write("# Guide\n\n## Crashes and reruns\n")
            with open(os.path.join(root, "README.md"), "w") as f:
                f.write("[ok](docs/guide.md#crashes-and-reruns) [top](#readme)\n"
                        "[gone](docs/gone.md) [typo](docs/guide.md#crash)\n"
                        "# README\n"
                        "`[code](docs/none.md)` [web](https://example.org/x)\n"
                        "```\n[fenced](docs/none.md)\n```\n"
                        "[up](../../etc/passwd)\n\n"
                        "[over a\nbreak](docs/guide.md#crashes) `a span\n[x](y.md)`\n")
            problems = broken_links(os.path.join(root, "README.md"), root)
        self.assertEqual(len(problems), 4, problems)
        self.assertIn("README.md:2: docs/gone.md: no such file", problems)
        self.assertIn("README.md:2: docs/guide.md#crash: no heading #crash in "
                      "docs/guide.md", problems)
        self.assertTrue(problems[2].endswith("outside the checkout"), problems)
        self.assertIn("README.md:10: docs/guide.md#crashes: no heading #crashes "
                      "in docs/guide.md", problems)


class DocsTest(unittest.TestCase):
    """This checkout's documents."""

    def test_readme_is_short(self):
        with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
            lines = len(f.read().splitlines())
        self.assertLessEqual(lines, README_MAX_LINES,
                             f"README.md has {lines} lines: move detail into "
                             f"docs/ (user-guide, admin-guide, reference)")

    def test_every_link_resolves(self):
        docs = documents(REPO)
        self.assertIn(os.path.join(REPO, "docs", "user-guide.md"), docs)
        problems = [p for path in docs for p in broken_links(path, REPO)]
        self.assertEqual(problems, [], "\n".join(problems))


if __name__ == "__main__":
    unittest.main()
