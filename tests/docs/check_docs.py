#!/usr/bin/env python3
"""The docs against the tree: README.md's map of the folders names only folders that exist and
every folder that holds sources (itself, or for deeper folders the one two levels down that holds
them: core/parallel covers core/parallel/tensor); every relative link in the project's Markdown
(README.md, CONTRIBUTING.md, docs/, the folders' READMEs) points at a file or folder that exists.

usage: check_docs.py SOURCE_DIR      (exit 1 listing every problem)"""
import os
import re
import sys

SOURCE_EXTENSIONS = (".cpp", ".h", ".cu", ".cuh", ".py", ".sh")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def skipped(root, name):
    path = os.path.join(root, name)
    return name.startswith(".") or os.path.exists(os.path.join(path, "CMakeCache.txt"))  # a build directory


def map_section(readme):
    text = open(readme, encoding="utf-8").read()
    start = text.find("## Map of the folders")
    if start < 0:
        return None
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def mapped_folders(section):
    folders = set()
    for target in LINK.findall(section):
        target = target.split("#")[0].rstrip("/")
        if target.endswith("README.md"):
            target = os.path.dirname(target)
        if target:
            folders.add(target)
    return folders


def source_folders(top):
    found = set()
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not skipped(root, d)]
        rel = os.path.relpath(root, top)
        if rel == "." or not any(f.endswith(SOURCE_EXTENSIONS) for f in files):
            continue
        found.add("/".join(rel.split(os.sep)[:2]))
    return found


def markdown_files(top):
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not skipped(root, d)]
        for f in files:
            if f.endswith(".md"):
                yield os.path.join(root, f)


def main(top):
    problems = []
    readme = os.path.join(top, "README.md")
    section = map_section(readme)
    if section is None:
        problems.append("README.md has no '## Map of the folders' section")
        section = ""
    listed = mapped_folders(section)
    for folder in sorted(listed):
        if not os.path.isdir(os.path.join(top, folder)):
            problems.append(f"README.md's map lists '{folder}', which is not a folder of the tree")
    for folder in sorted(source_folders(top)):
        if folder not in listed:
            problems.append(f"'{folder}' holds sources but README.md's map does not list it")
    for md in sorted(markdown_files(top)):
        text = open(md, encoding="utf-8").read()
        in_code = False
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                    continue  # a URL, or an anchor on the same page
                path = os.path.normpath(os.path.join(os.path.dirname(md), target.split("#")[0]))
                if not os.path.exists(path):
                    problems.append(f"{os.path.relpath(md, top)}:{number}: link '{target}' points nowhere")
    for p in problems:
        print(p)
    print(f"docs: {len(listed)} folders in the map, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
