"""`cmake --install build --component python` puts a complete, importable package into the
interpreter's site-packages (checked here under DESTDIR, so the test writes nothing outside tmp)."""

import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from conftest import BUILD_DIR


def test_the_python_component_installs_an_importable_package(tmp_path):
    if not (BUILD_DIR / "CMakeCache.txt").exists() or not shutil.which("cmake"):
        pytest.skip(f"no CMake build at {BUILD_DIR}")
    env = dict(os.environ, DESTDIR=str(tmp_path))
    r = subprocess.run(["cmake", "--install", str(BUILD_DIR), "--component", "python"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    sites = [p.parent for p in tmp_path.rglob("aqpim/__init__.py")]
    assert len(sites) == 1, sites
    site = sites[0].parent
    # the site is this interpreter's platlib (unless AQPIM_PYTHON_INSTALL_DIR says otherwise)
    cache = (BUILD_DIR / "CMakeCache.txt").read_text()
    if "AQPIM_PYTHON_INSTALL_DIR:PATH=\n" in cache:
        assert str(site).endswith(sysconfig.get_path("platlib"))
    assert (site / "aqpim" / "torch" / "pq_cache.py").exists() and list((site / "aqpim").glob("_aqpim*.so"))
    code = ("import importlib.util, aqpim; print(aqpim.__file__); print(aqpim.ProductQuantizer(8, 4))\n"
            "if importlib.util.find_spec('torch'): import aqpim.torch")
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(str(site)) and "ProductQuantizer(d=8, m=4" in r.stdout
