"""Every relative link in README.md, docs/ and tests/README.md resolves, anchors included.

The README is a map to docs/; a page renamed or a heading reworded must not leave a link that 404s on
GitHub. Anchors follow GitHub's slugs (github-slugger, which github.com uses for headings): the
heading's text lowercased, every character that is not a letter, digit, `_`, `-` or space dropped,
spaces turned into `-`, and `-1`, `-2`... added to a slug already taken on the page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "tests" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks and code spans, where a `[x](y)` is not a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken(page: Path) -> list[str]:
    problems = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            problems.append(f"{target}: no such file {shown(dest)}")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            problems.append(f"{target}: no heading with anchor #{anchor} in {shown(dest)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves_anchors_included(page):
    assert broken(page) == []


def test_the_slugs_are_githubs():
    assert slug("Checking live hosts: `doctor`") == "checking-live-hosts-doctor"
    assert slug("Time to serving: health probes per Docker Engine") == "time-to-serving-health-probes-per-docker-engine"
    assert slug("Will it fit: the capacity check") == "will-it-fit-the-capacity-check"
    assert slug("`plan --against` and `pin`") == "plan---against-and-pin"


def test_a_wrong_anchor_and_a_missing_page_are_found(tmp_path):
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Title\n\n## Part two\n\n## Part two\n")
    page.write_text("[x](b.md#part-two-1) [y](b.md#part-three) [z](c.md) [w](#here) `[v](nowhere.md)`\n\n# Here\n")
    assert [p.split(":")[0] for p in broken(page)] == ["b.md#part-three", "c.md"]


def test_the_readme_is_read_in_five_minutes():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250
