"""The release's files agree with each other: the version in Cargo.toml,
META.json (PGXN) and CHANGELOG.md, the license everywhere, and the upgrade
script the version needs. No server."""

import glob
import json
import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def read(name):
    with open(os.path.join(REPO, name), encoding="utf-8") as f:
        return f.read()


def cargo_version():
    return re.search(r'^version = "([^"]+)"', read("Cargo.toml"), re.M).group(1)


def test_meta_json_names_the_crates_version_and_license():
    meta = json.loads(read("META.json"))
    version = cargo_version()
    assert meta["version"] == version
    assert meta["provides"]["pg_idgen"]["version"] == version
    for key in ("name", "abstract", "maintainer", "license", "provides", "meta-spec"):
        assert meta.get(key), f"META.json lacks {key}, which the PGXN meta spec requires"
    assert meta["license"] == "apache_2_0"
    assert re.search(r'^license = "Apache-2.0"', read("Cargo.toml"), re.M)
    assert "Apache License" in read("LICENSE") and "Version 2.0" in read("LICENSE")
    for path in (meta["provides"]["pg_idgen"]["file"], meta["provides"]["pg_idgen"]["docfile"]):
        assert os.path.exists(os.path.join(REPO, path)), path


def test_the_changelog_has_every_release_and_the_upgrade_scripts_exist():
    changelog = read("CHANGELOG.md")
    version = cargo_version()
    assert re.search(rf"^## {re.escape(version)}\b", changelog, re.M), f"CHANGELOG.md has no {version}"
    releases = re.findall(r"^## (\d+\.\d+\.\d+)", changelog, re.M)
    assert releases == sorted(releases, key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    # Releases are recorded by commit; each named commit is in the history.
    for release, commit in re.findall(r"^## (\d+\.\d+\.\d+) — commit `([0-9a-f]+)`", changelog, re.M):
        assert os.system(f"git -C {REPO} cat-file -e {commit}^{{commit}} 2>/dev/null") == 0, \
            f"{release}'s commit {commit} is not in the repository"
    for older, newer in zip(releases[1:], releases):
        assert os.path.exists(os.path.join(REPO, "sql", f"pg_idgen--{older}--{newer}.sql")), \
            f"no upgrade script from {older} to {newer}"


def test_the_docs_changelog_is_the_changelog():
    assert read("docs/changelog.md") == read("CHANGELOG.md"), \
        "docs/changelog.md differs from CHANGELOG.md: copy it over"


def test_the_debian_package_names_the_project_as_its_maintainer():
    maintainer = re.search(r'^MAINTAINER=\$\{DEB_MAINTAINER:-"([^"]+)"\}', read("tests/package.sh"), re.M).group(1)
    name, address = re.fullmatch(r"(.+) <([^<>@\s]+@[^<>@\s]+)>", maintainer).groups()
    assert name in json.loads(read("META.json"))["maintainer"], (name, "is not META.json's maintainer")
    assert not re.search(r"seed|example|noreply", address), f"a placeholder address: {address}"


# Words that mean something only inside the team that wrote pg_idgen: the
# two documents it was designed from were called by a word of their own
# (this test's pattern spells it). Users know
# them as the segment (号段) allocator of Meituan Leaf and the
# URL-shortener article, the classic version-CAS protocol, and CosId.
JARGON = re.compile(r"\bthe seeds?\b|\bseeds'|\bseed's\b|\bseeds? (client|protocol|CAS|blog|double buffer)", re.I)


def user_facing_files():
    """What users read: the README, the docs site, the SQL scripts (their
    comments become the catalog's), the examples, and the Rust sources
    (their error messages, hints and comments on SQL objects), and the tests,
    whose names and messages a user reads when one fails. Not the
    packages npm installs under examples/node/node_modules: not ours."""
    patterns = ["README.md", "CHANGELOG.md", "docs/**/*.md", "sql/*.sql", "examples/**/*",
                "src/**/*.rs", "pg_test/**/*.rs", "tests/**/*.py", "tests/**/*.sh", "tests/regress/**/*.sql",
                "tests/bench/ceiling/src/*.rs"]
    for pattern in patterns:
        for path in glob.glob(os.path.join(REPO, pattern), recursive=True):
            if os.path.isfile(path) and "node_modules" not in path.split(os.sep):
                yield os.path.relpath(path, REPO)


def test_no_project_jargon_where_users_read():
    found = []
    for path in user_facing_files():
        with open(os.path.join(REPO, path), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                if JARGON.search(line):
                    found.append(f"{path}:{n}: {line.strip()}")
    assert not found, "project jargon:\n" + "\n".join(found)
