"""scripts/build_site.py's own rewriting: the guides' links and the playbooks' header comments."""

from __future__ import annotations

import importlib.util

from tests.helpers import ROOT

_spec = importlib.util.spec_from_file_location("build_site", ROOT / "scripts" / "build_site.py")
build_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_site)


def test_readme_links_point_at_the_site_pages():
    anchors = build_site.readme_anchors(build_site.readme_sections())
    text = ("[a](docs/gpu-isolation.md#sources) [b](#using-it-on-your-cluster) [c](playbooks/rollout.yml) "
            "[d](plugins/modules/bcd_rollout.py) [e](roles/bcd_daemonset/tasks/main.yml) [f](CHANGELOG.rst) "
            "[g](https://example.com/x) [h](sandbox/kind/README.md) [j](sandbox/README.md)\n```\n[i](docs/gpu-isolation.md)\n```\n")
    out = build_site.relink(text, ROOT / "README.md", anchors, ["bcd_rollout"])
    assert "[a](gpu-isolation.md#sources)" in out
    assert "[b](using-it-on-your-cluster.md#using-it-on-your-cluster)" in out
    assert "[c](../playbooks/rollout.md)" in out
    assert "[d](../bcd_rollout_module.rst)" in out
    assert "[e](../bcd_daemonset_role.rst)" in out
    assert "[f](../changelog.rst)" in out
    assert "[g](https://example.com/x)" in out
    assert "h (`sandbox/kind/README.md`)" in out  # no page: the words and the file, no dead link
    assert "[i](docs/gpu-isolation.md)" in out  # code is left alone
    assert "[j](sandbox.md)" in out  # the test bed's README is a guide of its own


def test_docs_links_back_into_the_readme_find_the_section_page():
    sections = build_site.readme_sections()
    anchors = build_site.readme_anchors(sections)
    title = next(t for t, _ in sections if t.startswith("Using it"))
    anchor = build_site.gh_slug(title)
    out = build_site.relink(f"[r](../README.md#{anchor}) [s](reliability.md)", ROOT / "docs" / "x.md", anchors, [])
    assert f"[r]({build_site.slug(title)}.md#{anchor})" in out
    assert "[s](reliability.md)" in out


def test_a_header_comment_keeps_its_commands_as_code_and_escapes_markup():
    lines = ["Do a thing. Each host in `clusters` is a cluster.", "",
             "  ansible-playbook x.yml [-i inventories/<yours>]", "      more of the command",
             "", "1. First <step>,", "   continued *here*."]
    out = build_site.comment_to_markdown(lines)
    assert "```shell\nansible-playbook x.yml [-i inventories/<yours>]\n    more of the command\n```" in out
    assert "`clusters`" in out
    assert r"1. First \<step\>," in out and r"continued \*here\*." in out


def test_the_index_leads_with_the_guides_then_the_reference_then_the_changelog():
    index = "\n".join([
        ".. _plugins_in_bcd.kubernetes:", "", "Bcd.Kubernetes", "==============", "", "Description", "-----------", "",
        ".. _changelog_section_for_bcd.kubernetes:", "", "Changelog", "---------", "", ".. toctree::", "", "    changelog", "",
        ".. _plugin_index_for_bcd.kubernetes:", "", "Plugin Index", "------------", "",
        ".. _module_plugins_in_bcd.kubernetes:", "", "Modules", "~~~~~~~", "", "* bcd_rollout", "",
        ".. _filter_plugins_in_bcd.kubernetes:", "", "Filter Plugins", "~~~~~~~~~~~~~~", "", "* bcd_fleet_lines", "",
        ".. _role_plugins_in_bcd.kubernetes:", "", "Role Index", "----------", "", "* fleet", ""])
    texts = {page: "# Operating\n\n## Rollouts and later nodes (rollout.yml, add-nodes.yml)\n\n"
             "## Audit and release (audit.yml, release-cluster.yml)\n"
             for page in ("using-it-on-your-cluster", "scheduling", "operations", "troubleshooting", "benchmarks")}
    guides = [("benchmarks", "Benchmarks"), ("operations", "Operating"), ("troubleshooting", "Troubleshooting"),
              ("scheduling", "Scheduling"), ("using-it-on-your-cluster", "Using it on your cluster")]
    out = build_site.arrange_index(index, {"rollout": ("Roll", "")}, guides, texts)
    order = [out.index(s) for s in ("Guides\n------", "guides/using-it-on-your-cluster>`", "guides/troubleshooting>`",
                                    "Benchmarks <guides/benchmarks>", "Reference\n---------", "Playbooks\n~~~~~~~~~",
                                    "Modules\n~~~~~~~", "Roles\n~~~~~", "Filter Plugins", "Changelog\n---------")]
    assert order == sorted(order), out
    # the guides in a reader's order, the rest after them as background
    assert out.index("Operating <guides/operations>") < out.index("Scheduling <guides/scheduling>")
    assert "guides/operations.html#audit-and-release-audityml-release-clusteryml" in out
    assert "Plugin Index" not in out and "Role Index" not in out and out.count(".. _plugin_index_for_bcd.kubernetes:") == 1
