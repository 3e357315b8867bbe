"""The documentation site (make docs), opened in a real browser.

out/docs is built when it is missing or older than its sources (scripts/build_site.py
--if-stale), served over HTTP on 127.0.0.1, and crawled from the index by headless Chromium:
every internal link must load without an error status, and so must everything each page loads
(style sheets, scripts, images); every link to an anchor must find it. Each module's page must
show its options table, with a row for each option of its DOCUMENTATION. The index and
bcd_rollout's page are photographed into out/docs-shots/.
"""

from __future__ import annotations

import ast
import html
import re
import subprocess
import sys
import threading
import urllib.request
from collections import deque
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urldefrag, urlsplit

import pytest
import yaml

from tests.docs.browser import Browser, find_or_install_chromium
from tests.helpers import ROOT

SITE = ROOT / "out" / "docs"
SHOTS = ROOT / "out" / "docs-shots"
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))

# what a page tells the test, read in the browser after its load event
PAGE_FACTS = """(() => ({
  title: document.title,
  links: [...document.querySelectorAll('a[href]')].map(a => a.href),
  ids: [...document.querySelectorAll('[id]')].map(e => e.id),
}))()"""

# a module page's options table as the browser shows it: the anchors of the options it lists
OPTIONS_TABLE = """(() => {
  const table = document.querySelector('section#parameters table.ansible-option-table');
  if (!table) return null;
  const box = table.getBoundingClientRect();
  return {
    visible: box.width > 0 && box.height > 0 && getComputedStyle(table).visibility !== 'hidden',
    options: [...table.querySelectorAll('[id^="parameter-"]')].map(e => e.id.slice('parameter-'.length)),
  };
})()"""


@pytest.fixture(scope="module")
def site():
    build = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_site.py"), "--if-stale"],
                           cwd=ROOT, capture_output=True, text=True)
    if build.returncode == 2 and "not in" in build.stderr:
        pytest.skip(f"the site cannot be built here: {build.stderr.strip()}")
    assert build.returncode == 0, f"make docs failed:\n{build.stdout[-4000:]}\n{build.stderr[-4000:]}"
    return SITE


@pytest.fixture(scope="module")
def server(site):
    """out/docs over HTTP; records the path and status of every request it answers."""
    answered: list[tuple[str, int]] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_request(self, code="-", size="-"):
            answered.append((self.path, int(code)))

        def log_message(self, format, *args):  # quiet
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", answered
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def chromium():
    path, why = find_or_install_chromium()
    if path is None:
        pytest.skip(why)
    return path


@pytest.fixture(scope="module")
def crawl(server, chromium):
    """Every page reached from the index by internal links: url -> its facts, plus the loads."""
    base, answered = server
    browser = Browser(chromium)
    pages: dict[str, dict] = {}
    loads: list[tuple[str, str, int]] = []  # (page, url, status)
    links: list[tuple[str, str]] = []  # (page, link)
    linked_from = {f"{base}/index.html": "the start"}
    queue = deque([f"{base}/index.html"])
    try:
        while queue:
            url = queue.popleft()
            if url in pages:
                continue
            loads.extend((url, loaded, status) for loaded, status in browser.load(url))
            facts = browser.eval(PAGE_FACTS)
            if url.removeprefix(base).removesuffix(".html").rsplit("/", 1)[-1].endswith("_module"):
                facts["options_table"] = browser.eval(OPTIONS_TABLE)
            pages[url] = facts
            for link in facts["links"]:
                if not link.startswith(base + "/"):
                    continue  # another site's
                links.append((url, link))
                target = urldefrag(link).url
                path = urlsplit(target).path
                if (path.endswith(".html") or path.endswith("/")) and target not in pages:
                    linked_from.setdefault(target, url)
                    queue.append(target)
    finally:
        browser.close()
    return {"base": base, "pages": pages, "loads": loads, "links": links, "answered": answered,
            "linked_from": linked_from}


def test_every_internal_link_and_load_succeeds(crawl):
    base, pages = crawl["base"], crawl["pages"]
    assert len(pages) > len(MODULES)
    failed = [f"{page.removeprefix(base)} (linked from {crawl['linked_from'][page].removeprefix(base)}) "
              f"loaded {url.removeprefix(base)}: HTTP {status}"
              for page, url, status in crawl["loads"] if status >= 400]
    failed += [f"the server answered {path} with {status}" for path, status in crawl["answered"] if status >= 400]
    # links to what is not a page (a download, a text file) are asked for once each
    for page, link in crawl["links"]:
        target = urldefrag(link).url
        if target not in pages and not any(url == target for _, url, _ in crawl["loads"]):
            try:
                urllib.request.urlopen(target, timeout=30).close()  # noqa: S310 (our own local server)
            except OSError as exc:
                failed.append(f"{page.removeprefix(base)} links to {link.removeprefix(base)}: {exc}")
    assert not failed, "\n".join(sorted(set(failed)))


def test_every_anchor_a_link_names_exists(crawl):
    base, pages = crawl["base"], crawl["pages"]
    missing = []
    for page, link in crawl["links"]:
        target, fragment = urldefrag(link)
        if fragment and target in pages and fragment not in pages[target]["ids"]:
            missing.append(f"{page.removeprefix(base)} -> {link.removeprefix(base)}")
    assert not missing, "links to anchors that are not there:\n" + "\n".join(sorted(set(missing)))


def test_a_page_for_each_module_role_playbook_guide_and_the_changelog(crawl):
    reached = {url.removeprefix(crawl["base"] + "/") for url in crawl["pages"]}
    expected = {f"{m}_module.html" for m in MODULES}
    expected |= {f"{p.parent.parent.name}_role.html" for p in (ROOT / "roles").glob("*/meta/argument_specs.yml")}
    expected |= {f"playbooks/{p.stem}.html" for p in (ROOT / "playbooks").glob("*.yml")}
    expected |= {f"guides/{p.stem}.html" for p in (ROOT / "docs").glob("*.md")}
    expected |= {f"guides/{page}.html" for page in ("overview", "sandbox")}  # sandbox/README.md
    expected |= {"changelog.html"}
    assert expected - reached == set(), "not reached from the index"


def _fragment_options(name: str) -> set[str]:
    """Options of a doc fragment of this collection (bcd.kubernetes.<file>[.<part>]); others add none."""
    if not name.startswith("bcd.kubernetes."):
        return set()
    file, _, part = name.removeprefix("bcd.kubernetes.").partition(".")
    tree = ast.parse((ROOT / "plugins" / "doc_fragments" / f"{file}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == (part.upper() or "DOCUMENTATION")
                                                for t in node.targets):
            return set(yaml.safe_load(ast.literal_eval(node.value)).get("options") or {})
    raise AssertionError(f"doc fragment {name} not found")


def module_options(module: str) -> list[str]:
    """The options a module's page documents: its own and those of its doc fragments."""
    tree = ast.parse((ROOT / "plugins" / "modules" / f"{module}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "DOCUMENTATION" for t in node.targets):
            doc = yaml.safe_load(ast.literal_eval(node.value))
            options = set(doc.get("options") or {})
            for fragment in doc.get("extends_documentation_fragment") or []:
                options |= _fragment_options(fragment)
            return sorted(options)
    raise AssertionError(f"{module} has no DOCUMENTATION")


@pytest.mark.parametrize("module", MODULES)
def test_module_page_shows_its_options_table(crawl, module):
    page = crawl["pages"][f"{crawl['base']}/{module}_module.html"]
    options = module_options(module)
    table = page["options_table"]
    if not options:
        # a module without options (a read-only probe such as bcd_runtime_info) has no table to show
        assert table is None, f"{module} documents no options, yet its page shows an options table"
        return
    assert table is not None, f"{module}'s page has no options table under Parameters"
    assert table["visible"], f"{module}'s options table is not shown"
    assert set(options) <= set(table["options"]), f"{module}'s table lacks {set(options) - set(table['options'])}"


def test_screenshots_of_the_index_and_bcd_rollout(crawl, chromium):
    base = crawl["base"]
    index = crawl["pages"][f"{base}/index.html"]
    # the way a newcomer takes: the index lists bcd_rollout, its page shows its options table
    assert f"{base}/bcd_rollout_module.html" in index["links"]
    assert crawl["pages"][f"{base}/bcd_rollout_module.html"]["options_table"]["visible"]
    browser = Browser(chromium)
    try:
        for name, url in (("index", f"{base}/index.html"), ("bcd_rollout", f"{base}/bcd_rollout_module.html#parameters")):
            dest = SHOTS / f"{name}.png"
            dest.unlink(missing_ok=True)
            browser.screenshot(url, dest)
            assert dest.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{dest} is not a PNG"
            assert dest.stat().st_size > 20_000, f"{dest} looks blank"
    finally:
        browser.close()


def readme_install() -> list[str]:
    """The commands of README's "Install" console block that build and install the collection."""
    text = (ROOT / "README.md").read_text().split("## Install\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```console\n(.*?)```", text, re.S).group(1)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    return [c for c in commands if c.startswith(("make build", "ansible-galaxy collection install"))]


def test_module_and_role_pages_install_as_the_readme_does(site):
    """The collection is not on Galaxy: each module's and role's note gives README's one install
    path (the tarball `make build` writes) and links to that section, not antsibull-docs'
    default `ansible-galaxy collection install bcd.kubernetes` and Galaxy page
    (docs/site/antsibull-docs.cfg)."""
    command = " && ".join(readme_install())
    assert command == "make build && ansible-galaxy collection install out/bcd-kubernetes-*.tar.gz", command
    pages = sorted(site.glob("*_module.html")) + sorted(site.glob("*_role.html"))
    assert len(pages) > len(MODULES)
    for page in pages:
        text = page.read_text()
        notes = [" ".join(html.unescape(re.sub(r"<[^>]+>", "", m)).split())
                 for m in re.findall(r"To install it,? use: (.*?)</p>", text, re.S)]
        redirect = "This redirect is part of" in text  # a renamed module's page has no install note
        assert notes == ([] if redirect else [f"{command}."]), f"{page.name}: {notes}"
        assert 'href="guides/install.html">bcd.kubernetes collection</a>' in text, page.name
    assert (site / "guides" / "install.html").is_file()
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert "galaxy.ansible.com" not in text and "collection install bcd.kubernetes" not in text, page.name


def test_the_index_leads_with_the_guides_then_the_reference_then_the_changelog(crawl):
    """A reader comes for a task (adopt, schedule rollouts, audit, release, troubleshoot): the
    guides come first, then the playbooks, modules, roles and plugins, the changelog last."""
    base = crawl["base"]
    links = [link.removeprefix(base + "/") for link in crawl["pages"][f"{base}/index.html"]["links"]]

    def first(prefix: str, suffix: str = "") -> int:
        return next(i for i, link in enumerate(links) if link.startswith(prefix) and urldefrag(link).url.endswith(suffix))

    assert first("guides/using-it-on-your-cluster") < first("guides/troubleshooting") < first("playbooks/")
    assert first("playbooks/") < first("bcd_", "_module.html") < first("bcd_", "_role.html") < first("changelog.html")


def test_no_page_speaks_the_projects_own_vocabulary(site):
    """A reader knows the specification as the bcd DaemonSet specification and its sections, not
    as the project's "seed 000" or "the brief" (the playbooks' header comments become their pages)."""
    said = {}
    for page in sorted(site.rglob("*.html")):
        text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))).split())
        # "seed 000", "seed: Trust"; a random generator's "fixed seed: <what it makes>" is fine
        found = re.findall(r"\b[Ss]eed(?:\s+0\d\d\b|:\s+[A-Z])", text)
        # the project's own name for the document its developers work from
        found += re.findall(r"\b[Tt]he brief\b", text)
        if found:
            said[str(page.relative_to(site))] = found
    assert said == {}
