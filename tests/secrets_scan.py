"""Find a secret (a join token, an API key) in text, files or Kubernetes objects.

A secret counts as found in its plain form or base64-encoded (at any of the three byte
alignments it can take inside a longer base64 string), in standard or URL-safe alphabet.
"""

from __future__ import annotations

import base64
import os
import tempfile
import time
from pathlib import Path

from tests.helpers import ROOT

SKIP_DIRS = {".git", ".venv", "collections", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}


def forms(secret: str) -> list[str]:
    """The plain secret and the base64 cores that any encoding of it must contain."""
    raw = secret.encode()
    out = {secret}
    for pad in range(3):
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            text = enc(b"\0" * pad + raw).decode().rstrip("=")
            core = text[4:-4]  # the characters that depend on the secret's bytes only
            if len(core) >= 16:
                out.add(core)
    return sorted(out)


def find_in_text(text: str, secrets: list[str]) -> list[str]:
    """Which secrets occur in ``text``, and in which form, redacted (never the secret itself, so a
    failing test does not print it): e.g. ``["secret 2 (48 chars) as base64"]``."""
    found = []
    for i, secret in enumerate(secrets, 1):
        for form in forms(secret):
            if form in text:
                found.append(f"secret {i} ({len(secret)} chars) as {'plain text' if form == secret else 'base64'}")
    return sorted(set(found))


def files_touched_since(since: float, roots: list[Path] | None = None, exclude: tuple[Path, ...] = ()) -> list[Path]:
    """Regular files under ``roots`` (default: the repository and the temp directory) modified
    at or after ``since`` (epoch seconds), skipping virtualenvs, collections, git and ``exclude``."""
    roots = roots or [ROOT, Path(tempfile.gettempdir()), Path.home() / ".ansible"]
    exclude = tuple(p.resolve() for p in exclude)
    found = []
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not any(
                (here / d).resolve() == e or e in (here / d).resolve().parents for e in exclude)]
            for name in filenames:
                path = here / name
                try:
                    st = path.lstat()
                except OSError:
                    continue
                if path.is_symlink() or not path.is_file() or st.st_mtime < since or st.st_size > 64 * 1024 * 1024:
                    continue
                if any(path.resolve() == e for e in exclude):
                    continue
                found.append(path)
    return found


def find_in_files(paths: list[Path], secrets: list[str]) -> dict[str, list[str]]:
    hits = {}
    for path in paths:
        try:
            data = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue
        got = find_in_text(data, secrets)
        if got:
            hits[str(path)] = got
    return hits


def now() -> float:
    return time.time() - 1.0
