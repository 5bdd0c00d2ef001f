"""pg_idgen's releases, recorded by commit (tags do not travel with the
branch), and building one of them from this repository's history for a
given PostgreSQL: used by the update test (tests/integration/test_upgrade.py)
and the benchmark's before/after comparison (tests/bench/release_delta.py)."""

import os
import re
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

RELEASES = {"0.1.0": "8c4bf95", "0.2.0": "0a85b84", "0.3.0": "c70e8f9"}


def pg_config_value(pg_config, flag):
    return subprocess.run([pg_config, flag], check=True, capture_output=True, text=True).stdout.strip()


def build_release(version, out_dir, pg_config, debug=True):
    """Builds a release's library and install script against `pg_config`
    (a debug build, or with the release profile); returns their paths.

    Built under a crate name of its own: the target directory is shared with
    the current tree (for its compiled dependencies), and the two must not
    overwrite each other's libpg_idgen.so. The library's file name does not
    matter (the caller installs it as pg_idgen.so); its SQL names
    MODULE_PATHNAME, which pg_idgen.control resolves. 0.1.0 declared only
    the pg15 feature; for 16-18 the matching feature line is added to the
    unpacked Cargo.toml (the source is unchanged, and compiles against all
    four)."""
    commit = RELEASES[version]
    crate = "pg_idgen_release_" + version.replace(".", "_")
    major = re.search(r"(\d+)", pg_config_value(pg_config, "--version")).group(1)
    src = os.path.join(out_dir, "src")
    os.makedirs(src)
    archive = subprocess.run(["git", "-C", REPO, "archive", commit], capture_output=True)
    assert archive.returncode == 0, (
        f"building release {version} needs commit {commit}, which this checkout "
        f"lacks: clone the repository with its history (no --depth)\n"
        f"{archive.stderr.decode(errors='replace')}")
    subprocess.run(["tar", "-x", "-C", src], input=archive.stdout, check=True)
    os.rename(os.path.join(src, "pg_idgen.control"), os.path.join(src, f"{crate}.control"))
    cargo_toml = os.path.join(src, "Cargo.toml")
    with open(cargo_toml) as f:
        manifest = f.read().replace('name = "pg_idgen"', f'name = "{crate}"', 1)
    # Resolved as the current tree is (its Cargo.toml says why), so the
    # release shares the current tree's compiled dependencies.
    if "\nresolver = " not in manifest:
        manifest = manifest.replace('edition = "2021"\n', 'edition = "2021"\nresolver = "1"\n', 1)
    if not re.search(rf"^pg{major} = ", manifest, re.M):
        manifest = manifest.replace(
            "pg_test = []", f'pg{major} = ["pgrx/pg{major}", "pgrx-tests/pg{major}"]\npg_test = []')
    with open(cargo_toml, "w") as f:
        f.write(manifest)
    env = dict(os.environ)
    env.setdefault("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    pkg = os.path.join(out_dir, "pkg")
    built = subprocess.run(
        ["cargo", "pgrx", "package", *(["--debug"] if debug else []), "--no-default-features", "--features",
         f"pg{major}", "--pg-config", pg_config, "--out-dir", pkg],
        cwd=src, env=env, capture_output=True, text=True)
    assert built.returncode == 0, f"building {version} failed:\n{built.stderr[-4000:]}"
    found = {}
    for root, _, files in os.walk(pkg):
        for name in files:
            found[name] = os.path.join(root, name)
    return found[f"{crate}.so"], found[f"{crate}--{version}.sql"]
