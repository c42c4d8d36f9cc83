#!/usr/bin/env python3
"""tests/layout/docs_links.py: README.md fits one screen, no relative link or named path of README.md or docs/*.md is
broken, and both layout descriptions name every folder of host/.

Usage: docs_links.py SOURCE_DIR. A link is [text](target) with a target that is not a URL: its file (relative to the
linking file) must exist, and its #anchor, when it names a Markdown file, must be the slug of one of that file's
headings as GitHub makes it (lower case; spaces to '-'; punctuation but '-' and '_' dropped). A named path is
`text` in backquotes that starts with one of the repository's top folders (`host/engine/trainer.cpp`,
`host/services/device_copies*.cpp`): it must exist (relative to SOURCE_DIR; * as in a shell), unless a part of it
is a placeholder in capitals (`tests/abi/frozen/vMAJOR_MINOR/`). Every folder host/NAME/ has a row `host/NAME/` in
the layout table of docs/architecture.md, and README.md names it as `NAME/` or `host/NAME/`.
"""
import glob
import pathlib
import re
import sys

README_MAX_LINES = 80
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$")
NAMED = re.compile(r"`([^`\s]+)`")
TOP_FOLDERS = ("bench/", "cmake/", "docs/", "examples/", "host/", "plugins/", "scripts/", "sdk/", "tests/")
PLACEHOLDER = re.compile(r"(^|[/_v])[A-Z]+(_[A-Z]+)*(/|$)")


def slug(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters, digits and '_'
    return text.replace(" ", "-")


def anchors(markdown: pathlib.Path) -> set:
    found, in_code = set(), False
    for line in markdown.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (match := HEADING.match(line)):
            found.add(slug(match.group(1)))
    return found


def problems(root: pathlib.Path) -> list:
    found = []
    readme = root / "README.md"
    lines = readme.read_text(encoding="utf-8").count("\n")
    if lines > README_MAX_LINES:
        found.append(f"README.md has {lines} lines, more than one screen ({README_MAX_LINES}): move detail to docs/")
    for page in [readme, *sorted((root / "docs").glob("*.md"))]:
        in_code = False
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                in_code = not in_code
                continue
            if in_code:
                continue
            for named in NAMED.findall(line):
                path = named.rstrip(".,;:")
                if path.startswith(TOP_FOLDERS) and not PLACEHOLDER.search(path):
                    if not glob.glob(str(root / path)):
                        found.append(f"{page.relative_to(root)}:{number}: names {path}: no such file or folder")
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # a URL
                path, _, anchor = target.partition("#")
                linked = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(root)}:{number}"
                if not linked.exists():
                    found.append(f"{where}: link to {target}: no such file")
                elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                    found.append(f"{where}: link to {target}: no heading with that anchor in {linked.name}")
    found += unnamed_host_folders(root)
    return found


def unnamed_host_folders(root: pathlib.Path) -> list:
    folders = sorted(path.name for path in (root / "host").iterdir() if path.is_dir())
    architecture = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    readme = (root / "README.md").read_text(encoding="utf-8")
    found = []
    for name in folders:
        if not re.search(rf"^\| `host/{name}/` \|", architecture, re.MULTILINE):
            found.append(f"docs/architecture.md: the layout table has no row for `host/{name}/`")
        if f"`{name}/`" not in readme and f"`host/{name}/`" not in readme:
            found.append(f"README.md: its layout does not name host/{name}/ (as `{name}/` or `host/{name}/`)")
    return found


def main() -> int:
    found = problems(pathlib.Path(sys.argv[1]))
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
