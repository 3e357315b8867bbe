# Sphinx settings of the documentation site (make docs; scripts/build_site.py writes the sources).
# Started from `antsibull-docs sphinx-init --use-current --squash-hierarchy bcd.kubernetes`, less
# its intersphinx mappings: they fetch inventories from the network at every build.

project = "bcd.kubernetes"
copyright = "bcd-ansible developers"
title = "bcd.kubernetes documentation"
html_title = "bcd.kubernetes documentation"
html_short_title = "bcd.kubernetes"

# sphinx_antsibull_ext renders antsibull-docs' module, role and changelog pages; myst_parser the
# guides, which are the README's sections and docs/*.md as they are.
extensions = ["sphinx_antsibull_ext", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# "#some-heading" anchors on the guides' headings, as GitHub makes them
myst_heading_anchors = 3

pygments_style = "ansible"
# antsibull-docs names its code blocks' languages; the guides' plain ``` blocks are shown as text
highlight_language = "none"

html_theme = "sphinx_ansible_theme"
html_show_sphinx = False
html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False
html_theme_options = {"collapse_navigation": False, "navigation_depth": 2}

default_role = "any"
nitpicky = True

# antsibull-docs' pages refer to a few pages of Ansible's own documentation by label, which an
# intersphinx inventory would resolve; this site fetches nothing at build time, so they link to
# those pages directly. Any other unresolved reference still fails the build.
ANSIBLE_DOCS = "https://docs.ansible.com/projects/ansible/latest/"
ANSIBLE_LABELS = {
    "action_plugins": ("plugins/action.html", "Action plugins"),
    "callback_plugins": ("plugins/callback.html", "Callback plugins"),
    "common_return_values": ("reference_appendices/common_return_values.html", "Return Values"),
    "ansible_configuration_settings": ("reference_appendices/config.html", "Ansible Configuration Settings"),
    # the concise callback extends ansible.builtin.default and names ansible.builtin.debug
    "ansible_collections.ansible.builtin.default_callback": ("collections/ansible/builtin/default_callback.html",
                                                             "ansible.builtin.default"),
    "ansible_collections.ansible.builtin.debug_module": ("collections/ansible/builtin/debug_module.html",
                                                         "ansible.builtin.debug"),
}


def _ansible_label(app, env, node, contnode):
    from docutils import nodes

    name = node.get("reftarget", "")
    if node.get("reftype") == "envvar" and name.startswith("ANSIBLE_"):
        # an ansible-core setting documented with the options a callback inherits from the default one
        target = (f"reference_appendices/config.html#envvar-{name}", name)
    else:
        target = ANSIBLE_LABELS.get(name)
        if node.get("reftype") != "ref" or target is None:
            return None
    ref = nodes.reference("", "", internal=False, refuri=ANSIBLE_DOCS + target[0])
    ref += contnode if contnode.astext() else nodes.Text(target[1])
    return ref


def setup(app):
    app.connect("missing-reference", _ansible_label)
