"""What the collection uses of ansible-core beyond its public plugin API, and the check of the
running ansible-core against it: here, and nowhere else.

Two features depend on names ansible-core keeps private, because they are worth their speed or
their output:

- the in-process runner (plugin_utils/bcd_inprocess.py) runs a module's ``main()`` in the worker
  process. Module side, it sets what the AnsiballZ wrapper would (``basic._ANSIBLE_ARGS``,
  ``_ANSIBLE_PROFILE``, ``AnsibleModule._record_module_result``, ``_internal.is_controller``, the
  wrapper's exception handler); controller side, the printed result goes through
  ``ActionBase._parse_returned_data`` as a module process's output does, then is cleaned and
  returned as ``ActionBase._execute_module`` returns it. ansible-core 2.19 and 2.20 return a dict
  from the parse; 2.21 and later an object with ``remove_internal_keys()`` and ``as_result_dict()``.
- the stdout callback ``concise`` calls the default callback's own helpers (the task banner, the
  warnings of a result, an item's label).

Each is checked before use, once per process: the running ansible-core's ``major.minor`` must be a
line we test (:data:`TESTED`), the names must exist with the signatures we call, and (for the
runner) a probe module must run in-process and come back through the parse as the dict we expect.
Anything else - a version never seen, a name gone, a different shape - turns the feature off:
modules then run as separate processes (ansible-core's own ``_execute_module``) and ``concise``
prints as ``ansible.builtin.default``. One warning says so (:func:`note`); a task never fails for
it.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
from collections.abc import Callable, Mapping

# The ansible-core lines the private paths were tested on, and the shape of what
# ActionBase._parse_returned_data returns on each: a dict, or the task result object of 2.21+.
DICT, TASK_RESULT = "dict", "task result"
TESTED: dict[tuple[int, int], str] = {(2, 19): DICT, (2, 20): DICT, (2, 21): TASK_RESULT, (2, 22): TASK_RESULT}
# The serialization profile of our modules (ansible-core's default for a Python module).
PROFILE = "legacy"
# Every note starts so; the stdout callback recognises them (a run-wide note, not a task's).
NOTE_PREFIX = "bcd: ansible-core "

_checked: dict[tuple[str, str], str | None] = {}


def core_version() -> str:
    """The running ansible-core's version string, e.g. ``2.21.5`` (read at each call)."""
    import ansible.release

    return str(ansible.release.__version__)


def core_line(version: str | None = None) -> tuple[int, int] | None:
    """``(major, minor)`` of ``version`` (default: the running one); None when it does not parse."""
    parts = (version or core_version()).split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _tested_range() -> str:
    lines = sorted(TESTED)
    return f"{lines[0][0]}.{lines[0][1]} to {lines[-1][0]}.{lines[-1][1]}"


def untested(version: str | None = None) -> str | None:
    """The note for ``version`` (default: the running one) when it is not a line the private paths
    were tested on, else None. One line for both features, so a run says it once."""
    version = version or core_version()
    if core_line(version) in TESTED:
        return None
    return (f"{NOTE_PREFIX}{version} is untested (tested: {_tested_range()}): bcd modules run as separate "
            "processes and bcd.kubernetes.concise prints as ansible.builtin.default")


def note(reason: str, display) -> None:
    """Say ``reason`` (a line from :func:`inprocess_unavailable` or :func:`callback_unavailable`)
    as a warning. Once per process here; a worker's warning reaches ansible-playbook, which prints
    an identical warning once per run."""
    key = ("note", reason)
    if key in _checked:
        return
    _checked[key] = None
    display.warning(reason)


def _params(func: object) -> list[str] | None:
    try:
        return list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return None


def _missing(owner: object, label: str, names: Mapping[str, list[str] | None]) -> list[str]:
    """The names of ``owner`` that are absent, or callable with other parameters than listed
    (None: any attribute will do)."""
    out = []
    for name, params in names.items():
        if not hasattr(owner, name):
            out.append(f"{label}.{name} is gone")
        elif params is not None and _params(getattr(owner, name)) != params:
            out.append(f"{label}.{name} takes {_params(getattr(owner, name))}, not {params}")
    return out


# -- the in-process runner ------------------------------------------------------------------------
def _runner_names() -> list[str]:
    """What the runner needs of the running ansible-core that is absent or different."""
    try:
        from ansible.module_utils import _internal, basic
        from ansible.module_utils._internal._ansiballz import _loader
        from ansible.module_utils.common import warnings
        from ansible.module_utils.common.json import Direction, get_module_decoder, get_module_encoder  # noqa: F401
        from ansible.plugins.action import ActionBase
    except ImportError as exc:
        return [f"cannot import {exc.name or exc}"]
    gone = _missing(basic, "basic", {"_ANSIBLE_ARGS": None, "_ANSIBLE_PROFILE": None, "_PARSED_MODULE_ARGS": None})
    gone += _missing(basic.AnsibleModule, "AnsibleModule", {"_record_module_result": ["self", "o"]})
    gone += _missing(_internal, "_internal", {"is_controller": None})
    gone += _missing(_loader, "_loader", {"_handle_exception": ["exception", "profile"]})
    gone += _missing(warnings, "warnings", {"_global_warnings": None, "_global_deprecations": None})
    gone += _missing(ActionBase, "ActionBase", {
        "_parse_returned_data": ["self", "res", "profile"],
        "_update_module_args": ["self", "module_name", "module_args", "task_vars", "ignore_unknown_opts"],
        "_compute_environment_string": ["self", "raw_environment_out"],
    })
    if not gone and not (isinstance(_internal.is_controller, bool)
                         and all(callable(getattr(getattr(warnings, n), "clear", None))
                                 for n in ("_global_warnings", "_global_deprecations"))):
        gone.append("_internal.is_controller or warnings._global_* have another type")
    return gone


def run_main(main: Callable[[], object], module_args: dict) -> tuple[str, int]:
    """Run a module's ``main`` in this process with ``module_args`` (what Ansible would send it,
    ``_ansible_*`` included), as the AnsiballZ wrapper would run it on a target; return what it
    would have printed (its JSON result) and its exit status. An exception from ``main`` is a
    failed result, as the wrapper reports it; nothing is raised. Only after
    :func:`inprocess_unavailable` returned None."""
    from ansible.module_utils import _internal, basic
    from ansible.module_utils._internal._ansiballz import _loader
    from ansible.module_utils.common import warnings
    from ansible.module_utils.common.json import Direction, get_module_encoder

    payload = json.dumps({"ANSIBLE_MODULE_ARGS": module_args}, cls=get_module_encoder(PROFILE, Direction.CONTROLLER_TO_MODULE))
    printed: list[str] = []

    def record(_module, result: dict) -> None:  # AnsibleModule's own hook for in-worker execution
        printed.append(json.dumps(result, cls=get_module_encoder(PROFILE, Direction.MODULE_TO_CONTROLLER)))

    saved = (basic._ANSIBLE_ARGS, basic._ANSIBLE_PROFILE, basic.AnsibleModule._record_module_result, _internal.is_controller)
    warnings._global_warnings.clear()
    warnings._global_deprecations.clear()
    basic._ANSIBLE_ARGS, basic._ANSIBLE_PROFILE = payload.encode(), PROFILE
    basic.AnsibleModule._record_module_result = record
    _internal.is_controller = False  # warnings go into the result, as on a target
    status = 0
    try:
        main()
        raise RuntimeError("New-style module did not handle its own exit.")
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception as exc:  # noqa: BLE001 - reported as the AnsiballZ wrapper does for a module process
        printed[:] = []
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                _loader._handle_exception(exc, PROFILE)
            except SystemExit:
                pass
        printed.append(out.getvalue())
        status = 1
    finally:
        basic._ANSIBLE_ARGS, basic._ANSIBLE_PROFILE, basic.AnsibleModule._record_module_result, _internal.is_controller = saved
        basic._PARSED_MODULE_ARGS = None
        warnings._global_warnings.clear()
        warnings._global_deprecations.clear()
    return "\n".join(printed), status


def parse_result(action, stdout: str, status: int, version: str | None = None) -> dict:
    """What ``ActionBase._execute_module`` returns for a module that printed ``stdout`` and exited
    with ``status``: parsed by ``action._parse_returned_data``, internal keys removed, a dict.
    Raises KeyError for a line not in :data:`TESTED` (check first)."""
    shape = TESTED[core_line(version)]
    parsed = action._parse_returned_data({"rc": status, "stdout": stdout, "stderr": ""}, PROFILE)
    if shape == DICT:
        from ansible.vars.clean import remove_internal_keys

        parsed.pop("_ansible_suppress_tmpdir_delete", None)
        remove_internal_keys(parsed)
        return parsed
    parsed.remove_internal_keys()
    return parsed.as_result_dict(for_round_trip=True)


def _probe_main() -> None:
    """The probe module: an option, a warning, a result."""
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(argument_spec={"value": {"type": "str", "required": True}, "boom": {"type": "bool", "default": False}},
                           supports_check_mode=True)
    if module.params["boom"]:
        raise ValueError("bcd probe exception")
    module.warn("bcd probe warning")
    module.exit_json(changed=False, value=module.params["value"], number=1)


def _probe_args(**args) -> dict:
    return {**args, "_ansible_check_mode": False, "_ansible_no_log": False, "_ansible_diff": False,
            "_ansible_verbosity": 0, "_ansible_debug": False, "_ansible_module_name": "bcd_probe",
            "_ansible_tracebacks_for": []}


def _probe_action():
    """An action plugin object for the parse alone (no task): what the parse reads of it."""
    from ansible.plugins.action import ActionBase

    class Probe(ActionBase):
        def run(self, tmp=None, task_vars=None):
            return {}

    action = object.__new__(Probe)
    action._used_interpreter = None
    return action


@contextlib.contextmanager
def _own_warnings():
    """A context that takes the warnings a parse captures (ansible-core 2.21 hands a module result's
    warnings to the running task's DeferredWarningContext as it parses), so the probe's warning is
    neither shown nor left in the task that ran it; yields the list it captured. Not a plugin API:
    without it, a list that stays empty (2.21 then shows the probe's warning and the probe falls
    back to separate processes, as for any surprise)."""
    try:
        from ansible._internal._display_utils import DeferredWarningContext

        ctx = DeferredWarningContext(variables={})
    except Exception:  # noqa: BLE001 - any failure of a private API means: capture nothing
        yield []
        return
    with ctx:
        yield ctx.get_warnings()


def _probe(version: str) -> str | None:
    """Run the probe module in-process (a result, then an exception) and parse what it printed as
    a module's output; None when both come back as expected, else what differs."""
    action = _probe_action()
    stdout, status = run_main(_probe_main, _probe_args(value="bcd-probe"))
    with _own_warnings() as captured:
        res = parse_result(action, stdout, status, version)
    # as the task result keeps them (2.19, 2.20), or as the task's warning context takes them (2.21+)
    warned = [getattr(getattr(w, "event", None), "msg", w)
              for w in [*(res.get("warnings") or [] if isinstance(res, dict) else []), *captured]]
    if not (status == 0 and isinstance(res, dict) and res.get("value") == "bcd-probe" and res.get("number") == 1
            and res.get("changed") is False and not res.get("failed") and warned == ["bcd probe warning"]):
        return f"a probe module's result came back as {type(res).__name__} {sorted(res) if isinstance(res, dict) else ''}"
    stdout, status = run_main(_probe_main, _probe_args(value="x", boom=True))
    with _own_warnings():
        res = parse_result(action, stdout, status, version)
    if not (status == 1 and isinstance(res, dict) and res.get("failed") is True
            and "bcd probe exception" in json.dumps(res, default=str)):
        return f"a probe module's exception came back as {type(res).__name__} {sorted(res) if isinstance(res, dict) else ''}"
    return None


def inprocess_unavailable(version: str | None = None) -> str | None:
    """None when the in-process runner can run modules on the running ansible-core; else the
    note that says why not (one line, see :func:`note`). Checked once per process and version:
    the line is tested, the names exist with the expected signatures, and a probe module's
    results (an ``exit_json``, an exception) come back through the parse as expected."""
    version = version or core_version()
    key = ("inprocess", version)
    if key not in _checked:
        reason = untested(version)
        if reason is None:
            gone = _runner_names()
            try:
                detail = "; ".join(gone) if gone else _probe(version)
            except Exception as exc:  # noqa: BLE001 - any surprise in the probe means: not here
                detail = f"a probe module failed: {type(exc).__name__}: {exc}"
            if detail:
                reason = (f"{NOTE_PREFIX}{version} is not what bcd's in-process runner expects ({detail}): "
                          "bcd modules run as separate processes")
        _checked[key] = reason
    return _checked[key]


# -- the stdout callback concise ------------------------------------------------------------------
def callback_unavailable(callback: object, version: str | None = None) -> str | None:
    """None when ``callback`` (a ``concise`` object, once the default callback's ``__init__`` ran)
    has the default callback's helpers that ``concise`` calls; else the note that says why not
    (``concise`` then prints as the default callback)."""
    version = version or core_version()
    reason = untested(version)
    if reason is None:
        gone = _missing(type(callback), "default callback", {
            "_print_task_banner": ["self", "task"],
            "_handle_warnings_and_exception": ["self", "result"],
            "_get_item_label": ["self", "result"],
            "host_label": ["result"],
        }) + _missing(callback, "default callback", {"_last_task_banner": None})
        if gone:
            reason = (f"{NOTE_PREFIX}{version} is not what bcd.kubernetes.concise expects ({'; '.join(gone)}): "
                      "it prints as ansible.builtin.default")
    return reason


def note_of(warning: object) -> str | None:
    """The text of a result's warning when it is one of our notes, else None. A warning is a
    string, ansible-core's warning object (``.event.msg``) or, in a callback's copy of a result,
    a mapping (``{"event": {"msg": ...}}``)."""
    if isinstance(warning, Mapping):
        event = warning.get("event")
        msg = event.get("msg") if isinstance(event, Mapping) else warning.get("msg")
    else:
        msg = getattr(getattr(warning, "event", None), "msg", warning)
    return msg if isinstance(msg, str) and msg.startswith(NOTE_PREFIX) else None
