"""PEP 517 build backend of aqpim (pyproject.toml): builds the extension aqpim._aqpim with CMake for
the interpreter running the build and writes a wheel of python/aqpim plus the extension, with the
standard library only (no setuptools, no wheel package, nothing downloaded).

The CMake build goes to build/pip-<SOABI> (tests, benchmarks and CUDA off; ccache when installed;
CMAKE_BUILD_PARALLEL_LEVEL jobs, default 2). The version is aqpim.__version__ (python/aqpim/__init__.py).
"""

import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "aqpim"
NAME = "aqpim"
SUMMARY = "Adaptive product quantization of the LLM KV cache, with attention computed on the codes"


def _version():
    return re.search(r'^__version__ = "([^"]+)"', (PACKAGE / "__init__.py").read_text(), re.M).group(1)


def _tag():
    interpreter = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{interpreter}-{interpreter}-{platform}"


def _build_extension():
    build_dir = ROOT / "build" / f"pip-{sysconfig.get_config_var('SOABI') or _tag()}"
    configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 f"-DAQPIM_PYTHON={sys.executable}", "-DAQPIM_BUILD_TESTS=OFF", "-DAQPIM_BUILD_BENCH=OFF",
                 "-DAQPIM_CUDA=OFF"]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    if shutil.which("ccache"):
        configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    subprocess.run(configure, check=True, stdout=sys.stderr)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    subprocess.run(["cmake", "--build", str(build_dir), "--target", "aqpim_python", "-j", jobs], check=True,
                   stdout=sys.stderr)
    return next((build_dir / "python" / "aqpim").glob("_aqpim*" + sysconfig.get_config_var("EXT_SUFFIX")))


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\nSummary: {SUMMARY}\n"
            "Requires-Python: >=3.8\nProvides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n")


def _wheel_file():
    return f"Wheel-Version: 1.0\nGenerator: aqpim_build\nRoot-Is-Purelib: false\nTag: {_tag()}\n"


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist_info = Path(metadata_directory) / f"{NAME}-{_version()}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(_metadata())
    (dist_info / "WHEEL").write_text(_wheel_file())
    return dist_info.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    extension = _build_extension()
    files = {f"aqpim/{p.relative_to(PACKAGE).as_posix()}": p.read_bytes()
             for p in sorted(PACKAGE.rglob("*.py"))}
    files[f"aqpim/{extension.name}"] = extension.read_bytes()
    dist_info = f"{NAME}-{_version()}.dist-info"
    files[f"{dist_info}/METADATA"] = _metadata().encode()
    files[f"{dist_info}/WHEEL"] = _wheel_file().encode()
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    name = f"{NAME}-{_version()}-{_tag()}.whl"
    with zipfile.ZipFile(Path(wheel_directory) / name, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return name
