#!/usr/bin/env python3
"""Build the collection's documentation site into out/docs (make docs).

1. antsibull-docs writes a page per module, filter, lookup and role (from DOCUMENTATION and
   meta/argument_specs.yml), the changelog (docs/docsite/config.yml) and the index, into
   out/docs-src.
2. This script adds a page per playbook (from its header comment, as antsibull-docs documents
   no playbooks) and the guides: the README cut at its `##` sections, docs/*.md as they are, and
   the READMEs of GUIDES_ELSEWHERE (the test bed's).
   Backticked names of a guide, a playbook or a module become links to its page. The index leads
   with the guides (START_HERE, GUIDE_ORDER), then the reference, then the changelog.
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

# The index leads with what an operator comes for: these tasks, each a link to the guide and
# heading that answers it (None: the page's top); a heading that is no longer there fails the build.
START_HERE = [
    ("Adopt a cluster", "using-it-on-your-cluster", None),
    ("Schedule rollouts (AWX/AAP, a systemd timer, CI)", "scheduling", None),
    ("Roll to a new image", "operations", "Rollouts and later nodes (rollout.yml, add-nodes.yml)"),
    ("Audit a cluster", "operations", "Audit and release (audit.yml, release-cluster.yml)"),
    ("Release a cluster", "operations", "Audit and release (audit.yml, release-cluster.yml)"),
    ("Troubleshooting: what the last line says, and what to run next", "troubleshooting", None),
]
# The guides in a reader's order: an operator's first (install, adopt, operate, schedule, fix),
# then the rest as "Background". A guide not named here is background, so none is left out.
GUIDE_ORDER = [
    "overview", "two-commands", "install", "using-it-on-your-cluster", "operations", "scheduling", "troubleshooting",
    "reports", "variables", "gpu-stack", "controller", "execution-environment", "use-from-your-own-playbooks",
    "what-is-in-it", "where-the-rest-is",
]


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


# --- the index: the guides first, then the reference (playbooks, modules, roles, plugins), then
# the changelog -----------------------------------------------------------------------------------

LABEL = re.compile(r"^\.\. _([A-Za-z0-9_.-]+):$", flags=re.M)


def index_blocks(text: str) -> tuple[str, dict[str, str]]:
    """antsibull-docs' index.rst as (the text before its first section label, label -> the block
    that starts with it and runs to the next label)."""
    starts = [m.start() for m in LABEL.finditer(text)]
    head = text[:starts[1]] if len(starts) > 1 else text  # the first label is the page's own
    blocks = {}
    for i, start in enumerate(starts[1:], 1):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        blocks[LABEL.match(text, start).group(1)] = text[start:end]
    return head, blocks


def relevel(block: str, title: str) -> str:
    """A section of the index one level down (its title ``title``), under the Reference section."""
    lines = block.splitlines()
    for i in range(1, len(lines)):
        if re.fullmatch(r"-{3,}", lines[i]) and lines[i - 1].strip():
            lines[i - 1], lines[i] = title, "~" * len(title)
            break
    return "\n".join(lines) + "\n"


def start_here(texts: dict[str, str]) -> list[str]:
    """The index's first list: each task, a link to its guide (and heading)."""
    lines = []
    for words, page, heading in START_HERE:
        text = texts.get(page)
        if text is None:
            raise SystemExit(f"build_site: START_HERE names guide {page!r}, which does not exist")
        if heading is None:
            lines.append(f"* :doc:`{words} <guides/{page}>`")
            continue
        if not re.search(rf"^#{{1,3}} {re.escape(heading)}$", text, flags=re.M):
            raise SystemExit(f"build_site: START_HERE names heading {heading!r} of guide {page!r}, which has none")
        lines.append(f"* `{words} <guides/{page}.html#{gh_slug(heading)}>`__")
    return lines


def arrange_index(text: str, playbooks: dict[str, tuple[str, str]], guides: list[tuple[str, str]],
                  texts: dict[str, str]) -> str:
    """The index as a reader takes it: the guides (the tasks first), then the reference - the
    playbooks, the modules, the roles, the other plugins - then the changelog."""
    head, blocks = index_blocks(text)
    known = {page for page, _ in guides}
    first = [p for p in GUIDE_ORDER if p in known]
    rest = sorted(known - set(first))
    titles = dict(guides)
    lines = [
        "", ".. _ansible_collections.bcd.kubernetes.docsite.guides:", "", "Guides", "------", "",
        "Start here:", "", *start_here(texts), "",
        ".. toctree::", "    :maxdepth: 1", "", *[f"    {titles[p]} <guides/{p}>" for p in first], "",
        "Background: how it is built and tested, what it was measured at, the API it talks to:", "",
        ".. toctree::", "    :maxdepth: 1", "", *[f"    {titles[p]} <guides/{p}>" for p in rest], "",
    ]
    lines += [
        "", ".. _plugin_index_for_bcd.kubernetes:", "", "Reference", "---------", "",
        f"Every playbook, module, role and plugin of the {COLLECTION} collection, each with every option.", "",
        ".. _ansible_collections.bcd.kubernetes.docsite.playbooks:", "", "Playbooks", "~~~~~~~~~", "",
        f"Each runnable by its FQCN (``ansible-playbook {COLLECTION}.rollout``) or from a checkout "
        "(``ansible-playbook rollout.yml``):", "",
    ]
    for stem, (name, _) in playbooks.items():
        lines.append(f"* :doc:`{stem} playbook <playbooks/{stem}>` -- {name}")
    lines += ["", ".. toctree::", "    :maxdepth: 1", "    :hidden:", ""]
    lines += [f"    playbooks/{stem}" for stem in playbooks]
    out = head.rstrip() + "\n" + "\n".join(lines) + "\n\n"
    plugins = [label for label in blocks if label.endswith("_plugins_in_bcd.kubernetes") and label != "role_plugins_in_bcd.kubernetes"]
    modules = [label for label in plugins if label.startswith("module_")]
    order = modules + (["role_plugins_in_bcd.kubernetes"] if "role_plugins_in_bcd.kubernetes" in blocks else [])
    order += [label for label in plugins if label not in modules]
    for label in order:
        block = blocks[label]
        out += relevel(block, "Roles") if label == "role_plugins_in_bcd.kubernetes" else block
    left = [label for label in blocks if label not in order and label not in ("plugin_index_for_bcd.kubernetes",
                                                                               "changelog_section_for_bcd.kubernetes")]
    for label in left:  # a section antsibull-docs adds one day: kept, before the changelog
        out += blocks[label]
    return out.rstrip() + "\n\n" + blocks.get("changelog_section_for_bcd.kubernetes", "").rstrip() + "\n"


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
    index.write_text(arrange_index(index.read_text(), playbooks, guides, texts))

    run([str(BIN / "sphinx-build"), "-b", "html", "-q", "-W", "--keep-going", "-c", str(ROOT / "docs" / "site"),
         "-d", str(DOCTREES), str(SRC), str(OUT)], env)
    (OUT / "index.html").touch()  # the stamp --if-stale compares
    print(f"{OUT.relative_to(ROOT)}: built in {time.monotonic() - start:.0f}s; open {OUT / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
