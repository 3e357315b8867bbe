"""What every bcd-ansible module shares: loading the inventory model, failing cleanly.

A module never lets a Python traceback reach the operator: invalid input fails with the
model's ``INVALID_CONFIG`` lines (one per problem, naming the variable and the rule).
"""

from __future__ import annotations

from ansible.module_utils.bcd_model import SECRET_VARIABLES, ConfigError, Inventory, load

CONFIG_OPTION = {"type": "dict", "required": True}


def inventory(module, required: tuple[str, ...] = ()) -> Inventory:
    """Validate ``module.params['config']`` (the bcd_* variables) with the inventory model.

    On invalid input calls ``module.fail_json`` with ``msg`` = the INVALID_CONFIG lines joined
    by newlines and ``errors`` = the same lines as a list; never returns in that case.
    """
    config = module.params["config"] or {}
    for name in SECRET_VARIABLES:
        # config never should hold a secret (lookup('bcd_inventory') leaves them out); if a
        # caller passes one anyway, mask it in everything the module returns.
        if isinstance(config, dict) and config.get(name) not in (None, ""):
            module.no_log_values.add(str(config[name]))
    try:
        return load(config, required)
    except ConfigError as exc:
        module.fail_json(msg="\n".join(exc.lines), errors=exc.lines)
        raise  # unreachable: fail_json exits


def write_new_file(path: str, data: bytes, mode: int) -> bool:
    """Write ``data`` to ``path`` only if no file is there, created with ``mode`` from the start.

    Returns True when written, False when ``path`` already holds exactly ``data`` (a re-run).
    Raises FileExistsError when ``path`` holds anything else (an existing file is refused), and
    OSError for other failures. The file appears whole or not at all (written to a temporary
    name in the same directory, then hard-linked into place, which never replaces a file).
    """
    import os
    import tempfile

    try:
        with open(path, "rb") as existing:
            if existing.read() == data:
                return False
        raise FileExistsError(path)
    except FileNotFoundError:
        pass
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".bcd-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(tmp, path)
    finally:
        os.unlink(tmp)
    return True
