"""The READMEs' code as a reader would use it: every ```c, ```python and ```rust block of
README.md and the bindings' READMEs is compiled and run, C with the README's own compiler
line, Rust as a new crate that depends on bindings/rust the way its README says; and the API
reference's main page links what it promises."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from example_util import REPO

READMES = ["README.md", "bindings/python/README.md", "bindings/rust/README.md"]


def blocks(lang):
    """(readme, index, code) of every fenced block of that language."""
    out = []
    for readme in READMES:
        text = open(os.path.join(REPO, readme)).read()
        for i, m in enumerate(re.finditer(r"^```(\w+)\n(.*?)^```", text, re.S | re.M)):
            if m.group(1) == lang:
                out.append(pytest.param(readme, m.group(2), id="%s-%d" % (readme, i)))
    return out


def test_every_readme_has_its_snippets():
    langs = {readme: set(re.findall(r"^```(\w+)", open(os.path.join(REPO, readme)).read(), re.M))
             for readme in READMES}
    assert {"c", "python", "rust"} <= langs["README.md"]
    assert "python" in langs["bindings/python/README.md"]
    assert "rust" in langs["bindings/rust/README.md"]


def readme_cc_line():
    """The compiler line the README gives for the C program (in its ```sh block)."""
    text = open(os.path.join(REPO, "README.md")).read()
    lines = [l for b in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)
             for l in b.splitlines() if l.startswith("cc ")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("readme,code", blocks("c"))
def test_c_snippet_compiles_and_runs_as_written(readme, code, build_dir, tmp_path):
    """Saved as example.c next to the repository's include/ and build/, built with the
    README's line (plus -Werror), run without LD_LIBRARY_PATH."""
    (tmp_path / "example.c").write_text(code)
    os.symlink(os.path.join(REPO, "include"), tmp_path / "include")
    os.symlink(build_dir, tmp_path / "build")
    line = readme_cc_line()
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    r = subprocess.run(["bash", "-c", line + " -Werror"], cwd=tmp_path, capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, line + "\n" + r.stderr
    exe = re.search(r"-o (\S+)", line).group(1)
    r = subprocess.run(["./" + exe], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert re.search(r"step 1: td_loss \d+\.\d+", r.stdout), r.stdout


@pytest.mark.parametrize("readme,code", blocks("python"))
def test_python_snippet_runs(readme, code, library, tmp_path):
    (tmp_path / "snippet.py").write_text(code)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "bindings", "python"),
               FOXHUNT_LIBRARY=library)
    # The interpreter running these tests (it has numpy); on the GPU machine /usr/bin/python3
    # has none, its Python being a virtual environment.
    r = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("cpu ")


@pytest.mark.parametrize("readme,code", blocks("rust"))
def test_rust_snippet_builds_in_a_crate_of_its_own(readme, code, library, cargo, tmp_path):
    """A new crate with a path dependency on bindings/rust and, as bindings/rust/README.md
    says for offline builds, a copy of its .cargo/config.toml."""
    crate = tmp_path / "readme_snippet"
    (crate / "src").mkdir(parents=True)
    (crate / ".cargo").mkdir()
    shutil.copy(os.path.join(REPO, "bindings", "rust", ".cargo", "config.toml"),
                crate / ".cargo" / "config.toml")
    (crate / "Cargo.toml").write_text(
        '[package]\nname = "readme_snippet"\nversion = "0.0.0"\nedition = "2021"\n\n'
        '[dependencies]\nfoxhunt = { path = "%s" }\n' % os.path.join(REPO, "bindings", "rust"))
    (crate / "src" / "main.rs").write_text(code)
    # Dependencies compiled once, kept beside the library's build between runs.
    env = dict(os.environ, FOXHUNT_LIBRARY=library,
               CARGO_TARGET_DIR=os.path.join(os.path.dirname(library), "readme-rust"))
    r = subprocess.run([cargo, "run", "--offline", "-q"], cwd=crate, capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Cpu: "), r.stdout  # the backend chosen, then what it did


def test_docs_main_page(build_dir):
    """The Doxygen main page (built by scripts/test.sh before pytest) holds the header's
    how-to and links to SPEC's sections and the design notes."""
    index = os.path.join(build_dir, "docs", "html", "index.html")
    if not os.path.exists(index):
        pytest.skip("API reference not built (cmake --build build --target docs)")
    html = open(index).read()
    assert "How to use it" in html and "fh_pipeline_upload" in html
    for section in ("spec_1", "spec_2", "spec_5_1", "spec_5_6", "spec_7", "spec_8"):
        assert 'href="spec.html#%s"' % section in html, section
    assert 'href="design.html"' in html
    spec = open(os.path.join(build_dir, "docs", "html", "spec.html")).read()
    for section in ("spec_1", "spec_5_1", "spec_7"):
        assert 'id="%s"' % section in spec or 'name="%s"' % section in spec, section
