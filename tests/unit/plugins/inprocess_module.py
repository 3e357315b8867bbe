"""A module for the in-process runner's tests (plugin_utils/bcd_inprocess.py): an AnsibleModule
with a required option, a typed one and a no_log one, that reports what it saw."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(argument_spec={"name": {"type": "str", "required": True},
                                          "count": {"type": "int", "default": 1},
                                          "secret": {"type": "str", "no_log": True},
                                          "crash": {"type": "bool", "default": False}},
                           supports_check_mode=True)
    p = module.params
    if p["crash"]:
        raise ValueError(f"an unexpected error in {p['name']}")
    if p["name"] == "warn":
        module.warn("a warning from the module")
    if p["name"] == "fail":
        module.fail_json(msg=f"cannot do it with {p['secret']}", node="n1")
    module.exit_json(changed=not module.check_mode, check_mode=module.check_mode, diff_mode=module._diff,
                     msg=f"{p['name']} x{p['count']} with {p['secret']}",
                     diff={"before": "", "after": f"key: {p['secret']}"} if module._diff else None)


if __name__ == "__main__":
    main()
