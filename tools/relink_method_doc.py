"""Re-point the line links of docs/method.md after code moved: each stale link is moved to the line that holds the
same `# §` comment in the working tree (looked up in the code as it was at the last commit that changed
docs/method.md, when the links were right). Run from the repository root:

    python tools/relink_method_doc.py && python -m pytest -q tests/test_docs.py
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

LINK = re.compile(r"\[(?P<name>[\w.]+) L(?P<line>\d+)\]\(\.\./(?P<path>[\w/.]+\.py)#L\d+\)")


def main() -> None:
    doc_path = Path("docs/method.md")
    doc = doc_path.read_text()
    ref = (
        subprocess.run(
            ["git", "log", "-1", "--format=%H", "--", str(doc_path)], capture_output=True, text=True
        ).stdout.strip()
        or "HEAD"
    )

    def fix(match: re.Match) -> str:
        path, line = match["path"], int(match["line"])
        current = Path(path).read_text().splitlines() if Path(path).exists() else []
        if line <= len(current) and "# §" in current[line - 1]:
            return match.group(0)
        committed = subprocess.run(["git", "show", f"{ref}:{path}"], capture_output=True, text=True).stdout
        text = committed.splitlines()[line - 1].strip()
        found = [(path, i + 1) for i, candidate in enumerate(current) if candidate.strip() == text]
        if not found:  # the code moved to another module: look for the same § comment in the whole package
            for other in sorted(Path("trl_loo_gspo").rglob("*.py")):
                lines = other.read_text().splitlines()
                found += [(str(other), i + 1) for i, candidate in enumerate(lines) if candidate.strip() == text]
        if len(found) != 1:
            raise SystemExit(f"cannot relink {path}#L{line} ({text!r}): {len(found)} matches")
        new_path, new_line = found[0]
        return f"[{Path(new_path).name} L{new_line}](../{new_path}#L{new_line})"

    doc_path.write_text(LINK.sub(fix, doc))


if __name__ == "__main__":
    main()
