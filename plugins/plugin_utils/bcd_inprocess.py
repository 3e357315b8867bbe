"""Run a module of the group ``bcd`` inside the controller's worker process, and fill ``config``.

Our cluster-side modules run on the controller (``ansible_connection: local``) with the Python
that runs ansible-playbook. Run as usual, each module run is a new Python that imports ansible,
pydantic and our module_utils again: about 0.7 s of CPU, some 25 times an adoption. Run here, it
is a function call in the worker process Ansible forks for the task, where ansible is loaded
already (the pattern ansible.utils uses for ``validate`` and ``cli_parse``), and the model too
when :func:`preload` ran in the parent before the fork (the collection's stdout callback does).

What runs is the module's own ``main()`` and its own ``AnsibleModule``: the same argument
validation and messages ("missing required arguments: run", "Unsupported parameters ..."), the
same check mode and diff flags, the same handling of ``no_log`` values (up to ansible-core 2.21
the module masks them in all it returns; from 2.22 it names them to the controller, which masks
them wherever it shows a result), the same ``fail_json`` results, the same warnings. Only the transport
changes: the arguments are encoded and the result decoded with the serialization profile Ansible
uses across the process boundary (so nothing controller-side leaks into the module, nor back),
the result goes through ``ActionBase._parse_returned_data`` like a module's output does, and
``ansible.module_utils`` behaves as on a target while the module runs (a warning is returned in
the result, not printed by the worker). What of ansible-core that takes beyond its public plugin
API is in plugin_utils/bcd_compat.py, and only there.

The module runs as a separate process, as before, whenever running it here could differ:

- the running ansible-core is not a line this runner was tested on, or its private names are not
  as the runner expects (plugin_utils/bcd_compat.py checks both, once, and a warning says so);
- the connection is not ``local`` (a task delegated to a GPU node over ssh);
- privilege escalation (``become``): the module must run as another user;
- an ``environment`` for the task, async, or an interpreter other than the controller's Python;
- a module outside this collection.

:class:`BcdAction` (base of every action plugin of the group) does both: ``_execute_module``
chooses in-process or not, and ``run`` fills ``config`` from ``lookup('bcd.kubernetes.bcd_inventory')``
(the task's own variables) when the task gives none, and ``api_key`` from ``bcd_api_key``, so a
playbook that includes our roles works without ``module_defaults`` for ``group/bcd.kubernetes.bcd``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Mapping

from ansible.module_utils.common.json import Direction, get_module_decoder
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_tmp
from ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_cp import key_stand_in
from ansible_collections.bcd.kubernetes.plugins.plugin_utils import bcd_compat

display = Display()

COLLECTION = "bcd.kubernetes"
PROFILE = bcd_compat.PROFILE
# What modules these module_utils import: loaded once in the parent (preload), shared by the
# forked workers, so no module run imports pydantic or the model again.
PRELOAD = ("ansible.module_utils.basic",
           "ansible_collections.bcd.kubernetes.plugins.module_utils.bcd_module",
           "kubernetes.config", "kubernetes.client.api_client", "kubernetes.client.configuration")
LOCAL_TRANSPORTS = frozenset({"local", "ansible.builtin.local", "ansible.legacy.local"})


def preload() -> None:
    """Import what our modules import, in the process that forks the workers (the stdout
    callback's start), check the running ansible-core for the in-process runner there, and make
    the run's :func:`bcd_tmp.private_dir`: each worker then finds all three done. Never fails the
    run; says once when modules will run as separate processes."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - a module run reports the same error, in its task
            display.vvv(f"bcd: could not preload {name}: {exc}")
    reason = bcd_compat.inprocess_unavailable()
    if reason:
        bcd_compat.note(reason, display)
    bcd_tmp.RUN_PROCESS = True
    try:
        # the run's own temporary directory: a worker's is made inside it, so what a killed
        # worker wrote goes with the run
        bcd_tmp.private_dir()
    except OSError as exc:
        display.vvv(f"bcd: no private temporary directory: {exc}")


def _same_python(interpreter: object) -> bool:
    if interpreter in (None, "") or (isinstance(interpreter, str) and interpreter.startswith("auto")):
        return True
    if not isinstance(interpreter, str):
        return False
    try:
        return os.path.realpath(interpreter) == os.path.realpath(sys.executable)
    except OSError:
        return False


def _transport(action: ActionBase) -> str | None:
    return getattr(action._connection, "transport", None) or getattr(action._connection, "_load_name", None)


def fallback_reason(action: ActionBase, module_name: str, task_vars: Mapping, wrap_async: bool = False) -> str | None:
    """Why ``module_name`` must run as a separate process for this task, or None (it runs here)."""
    if not module_name.startswith(COLLECTION + "."):
        return f"{module_name} is not a module of {COLLECTION}"
    transport = _transport(action)
    if transport not in LOCAL_TRANSPORTS:
        return f"the connection is {transport}, not local"
    if action._play_context.become:
        return "the task uses become"
    if wrap_async or action._task.async_val:
        return "the task is async"
    environment: dict = {}
    action._compute_environment_string(environment)
    if environment:
        return "the task sets an environment"
    host_vars = task_vars
    if action._task.delegate_to:
        host_vars = (task_vars.get("ansible_delegated_vars") or {}).get(action._task.delegate_to) or {}
    interpreter = host_vars.get("ansible_python_interpreter")
    if interpreter is not None:
        try:
            interpreter = action._templar.template(interpreter)
        except Exception:  # noqa: BLE001 - not templatable here: let Ansible's own module run say why
            return "ansible_python_interpreter cannot be resolved here"
    if not _same_python(interpreter):
        return f"ansible_python_interpreter is {interpreter}, not the controller's Python"
    return None


def _module_python_name(action: ActionBase, module_name: str) -> str | None:
    """The Python module of ``module_name`` (routing followed: a renamed module runs under its new
    name), or None when it is not a module of this collection."""
    ctx = action._shared_loader_obj.module_loader.find_plugin_with_context(module_name, collection_list=action._task.collections)
    fqcn = ctx.resolved_fqcn if ctx.resolved else None
    if not fqcn or not fqcn.startswith(COLLECTION + "."):
        return None
    return f"ansible_collections.{COLLECTION}.plugins.modules.{fqcn.rsplit('.', 1)[1]}"


def run_module_here(python_name: str, module_args: dict) -> tuple[str, int]:
    """Run the module ``python_name``'s ``main()`` with ``module_args`` (the arguments Ansible
    would send it, ``_ansible_*`` included) in this process; return what it would have printed
    (its JSON result) and its exit status. Only where :func:`bcd_compat.inprocess_unavailable`
    returned None; an exception of the module (its import included) is a failed result."""
    from ansible_collections.bcd.kubernetes.plugins.module_utils import bcd_watch

    def main() -> None:
        importlib.import_module(python_name).main()

    bcd_watch.IN_WORKER = True  # a wait's next slice runs here too: its watches may be parked for it
    try:
        return bcd_compat.run_main(main, module_args)
    finally:
        bcd_watch.IN_WORKER = False


class BcdAction(ActionBase):
    """Base of the action plugins of the group ``bcd``: a module run is in-process where that is
    safe (:func:`fallback_reason`); ``config`` (and ``api_key``) come from the inventory when the
    task gives none. ``MODULE``: the module a plain ``run`` executes once."""

    MODULE = ""
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        self._fill_defaults(task_vars or {})
        if self._runs_module_itself():
            return result
        return self._execute_module(module_name=self.MODULE or None, module_args=dict(self._task.args), task_vars=task_vars)

    def _fill_defaults(self, task_vars: Mapping) -> None:
        """``config`` from ``lookup('bcd.kubernetes.bcd_inventory')`` with the task's variables, when
        the task (or its play's module_defaults) gives none; ``api_key`` from ``bcd_api_key``
        likewise. Only for a module run on the controller: a task delegated to a GPU node gets
        neither the inventory nor the key. An ``api_key`` that is not a string never reaches the
        module (:meth:`_withhold_unusable_key`)."""
        args = self._task.args
        if self._on_controller() and self._wants_inventory(args):
            if args.get("config") is None:
                lookup = self._shared_loader_obj.lookup_loader.get(f"{COLLECTION}.bcd_inventory", loader=self._loader,
                                                                   templar=self._templar)
                args["config"] = lookup.run([], variables=dict(task_vars))[0]
            if args.get("api_key") is None and task_vars.get("bcd_api_key") is not None:
                key = self._templar.template(task_vars["bcd_api_key"])
                if key not in (None, ""):
                    args["api_key"] = key
        self._withhold_unusable_key(args)

    @staticmethod
    def _withhold_unusable_key(args: dict) -> None:
        """Drop an ``api_key`` that is not a string (a list, a mapping, a number: never a usable
        key) and put its empty stand-in in ``config``, so the model refuses it as ``bcd_api_key``.

        Given to the module, AnsibleModule would register every scalar inside it as a no_log value
        (``["n"]`` registers ``n``, ``7`` registers ``7``) and mask each of them in the module's
        whole message: the INVALID_CONFIG lines would lose the variable names and rules they are
        for. Withheld, its content reaches no module, so it is in no output either."""
        key = args.get("api_key")
        if key is None or isinstance(key, str):
            return
        del args["api_key"]
        config = args.get("config")
        if isinstance(config, Mapping) and config.get("bcd_api_key") is None:
            args["config"] = {**config, "bcd_api_key": key_stand_in(key)}

    def _runs_module_itself(self) -> bool:
        """Whether a subclass of ours (a poll, a retry watch) overrides ``run`` and executes the
        module itself. Another package's class in between does not count: mitogen's strategy
        mixes its ``ActionModuleMixin``, whose ``run`` only calls ours, into every action plugin."""
        for klass in type(self).__mro__:
            if "run" in vars(klass) and issubclass(klass, BcdAction):
                return klass is not BcdAction
        return False

    def _on_controller(self) -> bool:
        return _transport(self) in LOCAL_TRANSPORTS

    def _wants_inventory(self, args: Mapping) -> bool:
        """Whether this module run takes the inventory (a node-side scope does not)."""
        return True

    def _execute_module(self, module_name=None, module_args=None, tmp=None, task_vars=None, persist_files=False,
                        delete_remote_tmp=None, wrap_async=False, ignore_unknown_opts: bool = False):
        module_name = module_name or self.MODULE or self._task.action
        task_vars = task_vars if task_vars is not None else {}
        reason = bcd_compat.inprocess_unavailable()
        if reason:
            bcd_compat.note(reason, display)
        else:
            reason = fallback_reason(self, module_name, task_vars, wrap_async)
        python_name = None if reason else _module_python_name(self, module_name)
        if python_name is None:
            display.vvv(f"bcd: running {module_name} as a separate process: {reason or 'not a module of ' + COLLECTION}",
                        host=task_vars.get("inventory_hostname"))
            return super()._execute_module(module_name=module_name, module_args=module_args, task_vars=task_vars,
                                           persist_files=persist_files, wrap_async=wrap_async,
                                           ignore_unknown_opts=ignore_unknown_opts)
        module_args = dict(self._task.args if module_args is None else module_args)
        self._update_module_args(module_name, module_args, task_vars, ignore_unknown_opts=ignore_unknown_opts)
        display.vvv(f"bcd: running {module_name} in the worker process ({python_name})",
                    host=task_vars.get("inventory_hostname"))
        stdout, status = run_module_here(python_name, module_args)
        self._used_interpreter = None
        return bcd_compat.parse_result(self, stdout, status)


def decode(text: str) -> dict:
    """A module's printed result as the controller reads it (for tests)."""
    return json.loads(text, cls=get_module_decoder(PROFILE, Direction.MODULE_TO_CONTROLLER))
