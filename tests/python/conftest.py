"""Fixtures of the Python tests: where the shared data, the aqpim command and the C++ reference
helper are, and the example Llama. ctest sets the environment (python/CMakeLists.txt); run by hand,
``PYTHONPATH=build/python python3 -m pytest tests/python`` finds build/ beside the sources."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SOURCE_DIR = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("AQPIM_BUILD_DIR") or SOURCE_DIR / "build")
sys.path.insert(0, str(SOURCE_DIR / "examples"))


def shared_dir():
    """$AQPIM_SHARED when set, else ../shared beside the checkout (the C++ tests' rule)."""
    return Path(os.environ.get("AQPIM_SHARED") or os.environ.get("AQPIM_SHARED_DEFAULT") or SOURCE_DIR.parent / "shared")


def shared_path(rel):
    """The shared file rel; skips the test when it is absent."""
    p = shared_dir() / rel
    if not p.exists():
        pytest.skip(f"shared data not found: {p} (put ../shared beside the checkout or set AQPIM_SHARED=DIR)")
    return p


def tool(env, name):
    p = Path(os.environ.get(env) or BUILD_DIR / "bin" / name)
    if not p.exists():
        pytest.skip(f"{p} not built")
    return p


def run_cli(*args):
    """The aqpim command: (status, stdout, stderr)."""
    r = subprocess.run([str(tool("AQPIM_CLI", "aqpim")), *map(str, args)], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def run_reference(*args):
    """The C++ library called directly on raw files (python/reference.cpp)."""
    r = subprocess.run([str(tool("AQPIM_PY_REFERENCE", "aqpim_py_reference")), *map(str, args)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture
def rng():
    return np.random.default_rng(20)


@pytest.fixture(scope="session")
def synth_gguf(tmp_path_factory):
    """A random-weight GGUF (aqpim synth): 2 layers, 4 heads / 2 KV heads of 64, vocab 512."""
    path = tmp_path_factory.mktemp("synth") / "synth.gguf"
    status, _, err = run_cli("synth", "--shape", "custom", "--hidden", 256, "--ffn", 512, "--heads", 4, "--kv-heads", 2,
                             "--head-dim", 64, "--layers", 2, "--vocab", 512, "--ctx", 1024, "--type", "f16", "-o", path)
    assert status == 0, err
    return path
