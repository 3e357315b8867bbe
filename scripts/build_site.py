#!/usr/bin/env python3
"""Build the collection's documentation site into out/docs (make docs).

1. antsibull-docs writes a page per module, filter, lookup and role (from DOCUMENTATION and
   meta/argument_specs.yml), the changelog (docs/docsite/config.yml) and the index, into
   out/docs-src.
2. This script adds a page per playbook (from its header comment, as antsibull-docs documents
   no playbooks) and the guides: the README cut at its `##` sections, docs/*.md as they are, and
   the READMEs of GUIDES_ELSEWHERE (the test bed's).
   Backticked names of a guide, a playbook or a module become links to its page.
3. Sphinx (docs/site/conf.py) renders it all; any warning fails the build.

Usage: build_site.py [--if-stale]   (--if-stale: do nothing when out/docs is newer than its sources)
The tools are taken from the virtualenv of the Python that runs this script.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "out" / "docs-src"
OUT = ROOT / "out" / "docs"
DOCTREES = ROOT / "out" / "docs-doctrees"
BIN = Path(sys.executable).parent
COLLECTION = "bcd.kubernetes"
# the install note of each module and role page: the tarball, not Galaxy (the file says why)
ANTSIBULL_CFG = ROOT / "docs" / "site" / "antsibull-docs.cfg"

# What the site is made of: a change to any of these makes out/docs stale.
INPUTS = [
    "README.md", "sandbox/README.md", "CHANGELOG.rst", "galaxy.yml", "docs/*.md", "docs/site/*", "docs/docsite/*",
    "changelogs/changelog.yaml", "plugins/*/*.py", "plugins/doc_fragments/*.py",
    "roles/*/meta/argument_specs.yml", "playbooks/*.yml", "*.yml", "scripts/build_site.py",
]

# Guides that live outside docs/, by the page they get: the test bed, a package of its own,
# keeps its README beside its code.
GUIDES_ELSEWHERE = {"sandbox/README.md": "sandbox"}

FENCE = re.compile(r"^\s*(```|~~~)")


def sources() -> list[Path]:
    return sorted({p for pattern in INPUTS for p in ROOT.glob(pattern) if p.is_file()})


def stale() -> bool:
    index = OUT / "index.html"
    if not index.exists():
        return True
    return max(p.stat().st_mtime for p in sources()) > index.stat().st_mtime


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def outside_fences(lines: list[str]):
    """Yield (line, in_fence) for each line of a markdown text."""
    fence = None
    for line in lines:
        m = FENCE.match(line)
        if m and (fence is None or m.group(1) == fence):
            fence = m.group(1) if fence is None else None
            yield line, True
            continue
        yield line, fence is not None


# --- links from backticked names to their pages ---------------------------------------------

def link_targets(docs_pages: list[str], roots: dict[str, str], modules: list[str]) -> dict[str, str]:
    """`name` as the guides write it -> the page's path relative to guides/."""
    targets = {f"docs/{page}.md": f"{page}.md" for page in docs_pages}
    targets.update({path: f"{page}.md" for path, page in GUIDES_ELSEWHERE.items()})
    for stem in sorted((ROOT / "playbooks").glob("*.yml")):
        targets[f"playbooks/{stem.name}"] = f"../playbooks/{stem.stem}.md"
    for stem, root in roots.items():  # rollout.yml, the checkout's root playbook
        targets[root] = f"../playbooks/{stem}.md"
    for module in modules:
        targets[module] = f"../{module}_module.rst"
        targets[f"{COLLECTION}.{module}"] = f"../{module}_module.rst"
    return targets


def linkify(text: str, targets: dict[str, str]) -> str:
    """Turn each `name` with a page into a link to it, outside fenced blocks."""
    out = []
    for line, in_fence in outside_fences(text.splitlines()):
        if not in_fence:
            line = re.sub(r"(?<!\[)`([^`\n]+)`",
                          lambda m: f"[`{m.group(1)}`]({targets[m.group(1)]})" if m.group(1) in targets else m.group(0),
                          line)
        out.append(line)
    return "\n".join(out) + "\n"


def gh_slug(title: str) -> str:
    """A heading's anchor as GitHub (and MyST's myst_heading_anchors) make it."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def relink(text: str, source: Path, readme_anchors: dict[str, str], modules: list[str]) -> str:
    """Point the markdown links of a guide written in the repository at the site's pages.

    source is where the text lives in the repository (README.md, docs/NAME.md); the guide's page
    is guides/<page>.md. A link to a file the site has no page for keeps its words and names the
    file; a link to another site or an anchor of the same page is left as it is.
    """
    def target(m: re.Match) -> str:
        words, dest = m.group(1), m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", dest) or (dest.startswith("#") and source.name != "README.md"):
            return m.group(0)
        path, _, anchor = dest.partition("#")
        rel = os.path.normpath(os.path.join(source.parent.relative_to(ROOT), path)) if path else "README.md"
        page = None
        if rel == "README.md":
            page = readme_anchors.get(anchor, "overview.md")
        elif re.fullmatch(r"docs/[^/]+\.md", rel) and (ROOT / rel).exists():
            page = rel.removeprefix("docs/")
        elif rel in GUIDES_ELSEWHERE:
            page = f"{GUIDES_ELSEWHERE[rel]}.md"
        elif (m2 := re.fullmatch(r"playbooks/(\w+)\.yml", rel)) and (ROOT / rel).exists():
            page = f"../playbooks/{m2.group(1)}.md"
        elif (m2 := re.fullmatch(r"plugins/modules/(\w+)\.py", rel)) and m2.group(1) in modules:
            page = f"../{m2.group(1)}_module.rst"
        elif (m2 := re.fullmatch(r"roles/(\w+)(/.*)?", rel)) and (ROOT / "roles" / m2.group(1) / "meta" / "argument_specs.yml").exists():
            page = f"../{m2.group(1)}_role.rst"
        elif rel == "CHANGELOG.rst" or rel.startswith("changelogs"):
            page = "../changelog.rst"
        if page is None:
            return words if f"`{rel}`" in words else f"{words} (`{rel}`)"
        if anchor and page.endswith(".md") and "#" not in page:
            page += f"#{anchor}"
        return f"[{words}]({page})"

    def figure(m: re.Match) -> str:  # a figure of the repository is copied next to the guides
        dest = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", dest):
            return m.group(0)
        rel = os.path.normpath(os.path.join(source.parent.relative_to(ROOT), dest))
        if not (ROOT / rel).is_file():
            return m.group(0)  # Sphinx names the missing image
        name = rel.replace("/", "_")
        (SRC / "guides" / "figures").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, SRC / "guides" / "figures" / name)
        return f"![{m.group(1)}](figures/{name})"

    out = []
    for line, in_fence in outside_fences(text.splitlines()):
        if not in_fence:
            line = re.sub(r"!\[([^\]\n]*)\]\(([^)\s]+)\)", figure, line)
            line = re.sub(r"(?<!!)\[([^\]\n]+)\]\(([^)\s]+)\)", target, line)
        out.append(line)
    return "\n".join(out) + "\n"


# --- guides: the README's sections and docs/*.md ----------------------------------------------

def readme_sections() -> list[tuple[str, str]]:
    """(title, markdown) for the README's introduction and each `##` section, headings one level up."""
    sections: list[tuple[str, list[str]]] = [("Overview", [])]
    for line, in_fence in outside_fences((ROOT / "README.md").read_text().splitlines()):
        if not in_fence and line.startswith("## "):
            sections.append((line[3:].strip(), []))
        if not in_fence and re.match(r"^#{2,6} ", line):
            line = line[1:]
        sections[-1][1].append(line)
    return [(title, "\n".join(lines).strip() + "\n") for title, lines in sections if "".join(lines).strip()]


def readme_anchors(sections: list[tuple[str, str]]) -> dict[str, str]:
    """The anchor of each README heading -> the guide page that holds it, with the anchor."""
    anchors = {}
    for title, text in sections:
        page = f"{slug(title)}.md"
        for line, in_fence in outside_fences(text.splitlines()):
            if not in_fence and (m := re.match(r"^#{1,6} (.+)$", line)):
                anchors[gh_slug(m.group(1))] = f"{page}#{gh_slug(m.group(1))}"
    return anchors


# --- playbooks: a page from each header comment ------------------------------------------------

def playbook_roots() -> dict[str, str]:
    """playbooks/NAME.yml -> the checkout's root playbook that imports it (rollout.yml)."""
    roots = {}
    for path in sorted(ROOT.glob("*.yml")):
        m = re.search(r"import_playbook:\s*playbooks/(\w+)\.yml", path.read_text())
        if m:
            roots[m.group(1)] = path.name
    return roots


def header_comment(path: Path) -> list[str]:
    lines = []
    for line in path.read_text().splitlines():
        if line.strip() == "---" and not lines:
            continue
        if not line.startswith("#"):
            break
        lines.append(line[2:] if line.startswith("# ") else line[1:])
    return lines


def escape(text: str) -> str:
    """Markdown prose of a comment: keep `code`, escape what markdown would read as markup."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside backticks
        parts[i] = re.sub(r"([\\<>*\[\]])", r"\\\1", parts[i])
    return "`".join(parts)


def comment_to_markdown(lines: list[str]) -> str:
    """A header comment as markdown: prose, numbered steps, and the indented command lines as code."""
    out: list[str] = []
    code: list[str] = []

    def flush():
        if code:
            out.extend(["", "```shell", *code, "```", ""])
            code.clear()

    for line in lines:
        if code and line.startswith("    "):  # a command's continuation
            code.append(line[2:])
        elif re.match(r"^  \S", line):  # an example command
            code.append(line[2:])
        else:
            flush()
            out.append(escape(line))
    flush()
    return "\n".join(out).strip() + "\n"


def playbook_pages(modules: list[str]) -> dict[str, tuple[str, str]]:
    """stem -> (title, markdown) of each playbooks/*.yml."""
    roots = playbook_roots()
    pages = {}
    for path in sorted((ROOT / "playbooks").glob("*.yml")):
        stem = path.stem
        comment = header_comment(path)
        root = roots.get(stem)
        if root:
            name = re.search(r"^- name:\s*(.+)$", (ROOT / root).read_text(), flags=re.M).group(1).strip()
            run = (f"Run it from a checkout as `ansible-playbook {root}`, or from the installed collection as "
                   f"`ansible-playbook {COLLECTION}.{stem}`.")
        else:
            name = comment[0].split(":")[0].rstrip(".") if comment else stem
            run = "Every playbook imports it at its end; it is not run by itself."
        title = f"{stem} playbook -- {name}"
        body = comment_to_markdown(comment)
        # module names in the prose link to their pages
        parts = body.split("`")
        for i in range(0, len(parts), 2):
            parts[i] = re.sub(r"\b(" + "|".join(map(re.escape, modules)) + r")\b(?!\.)",
                              r"[\1](../\1_module.rst)", parts[i])
        body = "`".join(parts)
        pages[stem] = (name, f"# {title}\n\n{run} Its source: `playbooks/{stem}.yml`.\n\n{body}")
    return pages


# --- the index: the playbooks and the guides after antsibull-docs' plugin and role indexes -----

def index_sections(playbooks: dict[str, tuple[str, str]], guides: list[tuple[str, str]]) -> str:
    lines = [
        "", ".. _ansible_collections.bcd.kubernetes.docsite.playbooks:", "", "Playbooks", "---------", "",
        f"The playbooks of the {COLLECTION} collection, each runnable by its FQCN "
        f"(``ansible-playbook {COLLECTION}.rollout``) or from a checkout (``ansible-playbook rollout.yml``):", "",
    ]
    for stem, (name, _) in playbooks.items():
        lines.append(f"* :doc:`{stem} playbook <playbooks/{stem}>` -- {name}")
    lines += ["", ".. toctree::", "    :maxdepth: 1", "    :hidden:", ""]
    lines += [f"    playbooks/{stem}" for stem in playbooks]
    lines += [
        "", ".. _ansible_collections.bcd.kubernetes.docsite.guides:", "", "Guides", "------", "",
        "The README's sections, the notes of ``docs/`` and the test bed's README:", "",
        ".. toctree::", "    :maxdepth: 1", "",
    ]
    lines += [f"    {title} <guides/{page}>" for page, title in guides]
    return "\n".join(lines) + "\n"


def run(cmd: list[str], env: dict[str, str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--if-stale", action="store_true", help="do nothing when out/docs is up to date")
    args = ap.parse_args()
    if args.if_stale and not stale():
        print(f"{OUT.relative_to(ROOT)} is up to date")
        return 0
    missing = [tool for tool in ("antsibull-docs", "sphinx-build") if not (BIN / tool).exists()]
    if missing:
        print(f"build_site: {', '.join(missing)} not in {BIN}: install requirements-dev.txt (make setup)",
              file=sys.stderr)
        return 2
    start = time.monotonic()
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT / "collections"))

    shutil.rmtree(SRC, ignore_errors=True)
    SRC.mkdir(parents=True, mode=0o700)  # antsibull-docs wants its directory readable by itself only
    run([str(BIN / "antsibull-docs"), "--config-file", str(ANTSIBULL_CFG), "collection", "--use-current",
         "--squash-hierarchy", "--fail-on-error", "--dest-dir", str(SRC), COLLECTION], env)

    modules = sorted(p.name.removesuffix("_module.rst") for p in SRC.glob("*_module.rst"))
    playbooks = playbook_pages(modules)
    guides: list[tuple[str, str]] = []  # (page, title)
    texts: dict[str, str] = {}
    sections = readme_sections()
    anchors = readme_anchors(sections)
    for title, text in sections:
        page = slug(title)
        guides.append((page, title))
        texts[page] = relink(text, ROOT / "README.md", anchors, modules)
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text()
        title = re.search(r"^# (.+)$", text, flags=re.M)
        guides.append((path.stem, title.group(1) if title else path.stem))
        texts[path.stem] = relink(text, path, anchors, modules)
    for rel, page in GUIDES_ELSEWHERE.items():
        text = (ROOT / rel).read_text()
        title = re.search(r"^# (.+)$", text, flags=re.M)
        guides.append((page, title.group(1) if title else page))
        texts[page] = relink(text, ROOT / rel, anchors, modules)
    targets = link_targets([p.stem for p in (ROOT / "docs").glob("*.md")], playbook_roots(), modules)
    (SRC / "guides").mkdir(exist_ok=True)
    for page, text in texts.items():
        (SRC / "guides" / f"{page}.md").write_text(linkify(text, targets))
    (SRC / "playbooks").mkdir()
    for stem, (_, text) in playbooks.items():
        (SRC / "playbooks" / f"{stem}.md").write_text(text)
    index = SRC / "index.rst"
    index.write_text(index.read_text() + index_sections(playbooks, guides))

    run([str(BIN / "sphinx-build"), "-b", "html", "-q", "-W", "--keep-going", "-c", str(ROOT / "docs" / "site"),
         "-d", str(DOCTREES), str(SRC), str(OUT)], env)
    (OUT / "index.html").touch()  # the stamp --if-stale compares
    print(f"{OUT.relative_to(ROOT)}: built in {time.monotonic() - start:.0f}s; open {OUT / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
