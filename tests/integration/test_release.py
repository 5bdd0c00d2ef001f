"""The release's files agree with each other: the version in Cargo.toml,
META.json (PGXN) and CHANGELOG.md, the license everywhere, and the upgrade
script the version needs. No server."""

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
