"""``trl-loo-gspo train --help`` without importing TRL: the help text, generated once and shipped with the package.

Building the parser imports TRL, transformers and torch (~5 s); the help text depends only on the argument
dataclasses, so it is stored in ``train_help.txt`` under a key made of the package sources the dataclasses come from
and the Python, TRL and transformers versions. A stale or missing file is never shown: the help is then built live
(once: with other library versions than the shipped copy's, the first call takes ~5 s) and stored in the user cache
(``$TRL_LOO_GSPO_CACHE`` or ``~/.cache/trl_loo_gspo``) for the next call.

The stored file also lists every flag the parser accepts (its second line), so that ``train`` names an unknown flag
before TRL is imported (:func:`trl_loo_gspo.cli.flags.train_precheck`).

Regenerate the shipped file after changing a flag's help: ``python -m trl_loo_gspo.cli.help_cache``
(``tests/test_cli_errors.py`` checks that it is current).
"""

from __future__ import annotations

import hashlib
import os
import sys
from importlib import metadata
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
SHIPPED = Path(__file__).with_name("train_help.txt")
#: The sources of the argument dataclasses (their fields and help strings) and of the help's layout.
SOURCES = (
    "config/fields.py",
    "config/objective.py",
    "config/precision.py",
    "algorithms/group_filter.py",
    "algorithms/aggregation.py",
    "algorithms/advantages.py",
    "experiment/build.py",
    "experiment/parser.py",
    "experiment/spelling.py",
)
_HEADER = "# trl-loo-gspo train --help, key "
_FLAGS = "# flags: "


def sources_key() -> str:
    """The package sources of :data:`SOURCES`, hashed (what a developer changes: regenerate after it changes)."""
    digest = hashlib.sha256()
    for name in SOURCES:
        path = PACKAGE / name
        digest.update(name.encode())
        digest.update(path.read_bytes() if path.exists() else b"")
    return digest.hexdigest()[:12]


def libraries_key() -> str:
    """The Python, TRL and transformers versions, hashed (their argument dataclasses are part of the help)."""
    digest = hashlib.sha256()
    digest.update(f"{sys.version_info[0]}.{sys.version_info[1]}".encode())
    for dist in ("trl", "transformers"):
        try:
            digest.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{dist}=none".encode())
    return digest.hexdigest()[:8]


def help_key() -> str:
    """What the help text depends on: ``<sources key>-<libraries key>``."""
    return f"{sources_key()}-{libraries_key()}"


def shipped_key() -> str | None:
    """The key the shipped copy was built under (``None`` if it is missing)."""
    try:
        header = SHIPPED.read_text().partition("\n")[0]
    except OSError:
        return None
    return header[len(_HEADER) :] if header.startswith(_HEADER) else None


def _user_cache() -> Path:
    """``train-help.txt`` in the demo's cache folder (``$TRL_LOO_GSPO_CACHE``, else ``~/.cache/trl_loo_gspo``)."""
    if os.environ.get("TRL_LOO_GSPO_CACHE"):
        return Path(os.environ["TRL_LOO_GSPO_CACHE"]) / "train-help.txt"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trl_loo_gspo" / "train-help.txt"


def _read_parts(path: Path, key: str) -> tuple[str | None, list[str] | None]:
    """The help text and the flag list stored at ``path`` under ``key`` (None for what is missing or stale)."""
    try:
        header, _, text = path.read_text().partition("\n")
    except OSError:
        return None, None
    if header != _HEADER + key:
        return None, None
    flags = None
    if text.startswith(_FLAGS):
        line, _, text = text.partition("\n")
        flags = line[len(_FLAGS) :].split()
    return text, flags


def _read(path: Path, key: str) -> str | None:
    return _read_parts(path, key)[0]


def cached_help() -> str | None:
    """The help text if a stored copy matches the installed code and libraries, else None."""
    key = help_key()
    return _read(SHIPPED, key) or _read(_user_cache(), key)


def cached_flags() -> list[str] | None:
    """Every flag of ``train`` (both spellings) if a stored copy matches the installed code and libraries, else
    None (nothing is imported: ~10 ms)."""
    key = help_key()
    return _read_parts(SHIPPED, key)[1] or _read_parts(_user_cache(), key)[1]


def parser_flags(parser) -> list[str]:
    """The long option strings of ``parser`` (``--config`` and ``--help-all`` are read before it parses)."""
    return sorted({o for a in parser._actions for o in a.option_strings if o.startswith("--")})


def live_help() -> str:
    """Build the parser (imports TRL) and format its help."""
    return _live()[0]


def _live() -> tuple[str, list[str]]:
    from ..experiment.build import make_parser

    parser = make_parser()
    return parser.format_help(), parser_flags(parser)


def store(text: str, path: Path | None = None, flags: list[str] | None = None) -> None:
    """Store ``text`` (and ``flags``) under the current key (the user cache by default); a cache that cannot be
    written is skipped."""
    path = path or _user_cache()
    listed = f"{_FLAGS}{' '.join(flags)}\n" if flags else ""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        partial.write_text(f"{_HEADER}{help_key()}\n{listed}{text}")
        os.replace(partial, path)
    except OSError:
        pass


def train_help() -> str:
    """The help text of ``trl-loo-gspo train``: stored, else built live (and stored for the next call)."""
    text = cached_help()
    if text is None:
        text, flags = _live()
        store(text, flags=flags)
    return text


if __name__ == "__main__":  # regenerate the shipped copy
    text, flags = _live()
    store(text, SHIPPED, flags)
    print(f"wrote {SHIPPED}")
