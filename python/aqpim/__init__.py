"""aqpim from Python: the product quantizer, k-means, attention on PQ codes, every KV-cache scheme
of the runtime and the runtime itself, over numpy arrays (docs/python.md). PyTorch integration:
``aqpim.torch`` (PQKVCache, PQAttention, the ``aqpim::pq_attention`` operator).

Arrays: float32 C-contiguous arrays are read in place; other float dtypes and strided views are
converted once; codes are uint8. Long calls release the GIL. Errors of the C++ library raise
``aqpim.Error`` (a RuntimeError) with the library's message; bad shapes and dtypes raise
ValueError / TypeError naming the argument.
"""

import sys

try:
    import numpy as _numpy  # noqa: F401  (the extension's arrays are numpy arrays)
except ImportError:  # pragma: no cover - depends on the interpreter
    raise ImportError(
        f"aqpim needs numpy, which this interpreter ({sys.executable}) cannot import. On Debian 12 use "
        "/usr/bin/python3 with python3-numpy (scripts/setup.sh installs it); see docs/python.md"
    ) from None

from ._aqpim import (  # noqa: E402
    Error,
    GenerateResult,
    KvCache,
    Model,
    PackedCodes,
    PerplexityResult,
    ProductQuantizer,
    Tokenizer,
    default_threads,
    dense_attention,
    kmeans,
    pack_codes,
    pq_attention,
    set_default_threads,
    simd_level,
)

Error.__module__ = "aqpim"  # tracebacks say aqpim.Error

__version__ = "0.1.0"

__all__ = [
    "Error",
    "GenerateResult",
    "KvCache",
    "Model",
    "PackedCodes",
    "PerplexityResult",
    "ProductQuantizer",
    "Tokenizer",
    "default_threads",
    "dense_attention",
    "kmeans",
    "pack_codes",
    "pq_attention",
    "set_default_threads",
    "simd_level",
]
