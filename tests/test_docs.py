"""docs/method.md links each formula to a line of code: every link must land on a `# §` comment."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(\.\./(?P<path>[\w/.]+\.py)#L(?P<line>\d+)\)")


def test_method_links_land_on_spec_comments():
    text = (ROOT / "docs" / "method.md").read_text()
    links = list(LINK.finditer(text))
    assert len(links) >= 14
    for link in links:
        lines = (ROOT / link["path"]).read_text().splitlines()
        line = lines[int(link["line"]) - 1]
        assert "# §" in line, (
            f"{link['path']}#L{link['line']} is not a § comment: {line.strip()!r}; "
            "run: python tools/relink_method_doc.py"
        )


def test_every_spec_comment_in_the_pure_functions_is_documented():
    """Every ``# §`` comment of algorithms/ (the formulas) is linked from docs/method.md, and no link is stale."""
    text = (ROOT / "docs" / "method.md").read_text()
    linked = {(m["path"], int(m["line"])) for m in LINK.finditer(text) if "/algorithms/" in m["path"]}
    commented = set()
    for path in sorted((ROOT / "trl_loo_gspo" / "algorithms").glob("*.py")):
        relative = str(path.relative_to(ROOT))
        for i, line in enumerate(path.read_text().splitlines()):
            if line.strip().startswith("# §"):
                commented.add((relative, i + 1))
    assert commented == linked, f"undocumented: {sorted(commented - linked)}, stale: {sorted(linked - commented)}"


SHIPPED = ("trl_loo_gspo", "docs", "recipes", "benchmarks", "tests", "tools", "README.md", "CHANGELOG.md")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt"}


def _shipped_texts():
    for name in SHIPPED:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES)
        for file in files:
            if "__pycache__" not in file.parts:
                yield file, file.read_text(errors="replace")


def test_no_citation_of_a_document_the_repository_does_not_ship():
    here = Path(__file__).name
    cited = [
        f"{file.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}: {m.group(0)!r}"
        for file, text in _shipped_texts()
        if file.name != here
        for m in re.finditer(r"\bSPEC\b|SPEC\.md|design note|seed/", text)
    ]
    assert not cited, "cite docs/method.md instead:\n" + "\n".join(cited[:20])


def test_every_cited_section_exists_in_method_md():
    text = (ROOT / "docs" / "method.md").read_text()
    sections = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", text, flags=re.M))
    assert {"1", "2", "2.1", "2.2", "3", "3.1", "3.2", "3.3", "4", "5", "5.1", "5.2", "6"} <= sections
    citation = re.compile(r"(?:# |method(?:\.md)? )§(\d+(?:\.\d+)?)")
    missing = [
        f"{file.relative_to(ROOT)}: §{number}"
        for file, content in _shipped_texts()
        for number in citation.findall(content)
        if number not in sections
    ]
    assert not missing, "cited sections that docs/method.md does not have:\n" + "\n".join(sorted(set(missing)))
