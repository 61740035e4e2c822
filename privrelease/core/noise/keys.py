"""Record keys for the cell key method: each record's key, uniform on the integers [0, 2^32), drawn once for a
dataset and the same at every release.

A dataset holds one secret of 32 bytes from the operating system's entropy (``secret``); record i's key is the
i-th 32-bit word of AES-256 in counter mode under that secret (``record_keys``): a keyed pseudorandom function of
the record's position, so the keys are as good as uniform and independent to whoever lacks the secret, and the same
record gets the same key in every table, which is what makes the method's perturbation consistent. A test run's
secret comes from its seed (test mode only, as every fixed seed).
"""

from __future__ import annotations

import os

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from privrelease.core.noise import check_seed

BYTES = 32
KEY_BITS = 32  # a key is an integer below 2^KEY_BITS; a cell's key is its records' keys summed modulo 2^KEY_BITS


def secret(test_seed: int | None = None) -> bytes:
    """A dataset's secret: 32 bytes of OS entropy, or, in test mode with a seed only, from the seed."""
    if test_seed is None:
        return os.urandom(BYTES)
    check_seed(test_seed)
    return np.random.Generator(np.random.PCG64(test_seed)).bytes(BYTES)


def record_keys(key: bytes, n: int) -> np.ndarray:
    """The keys of records 0 .. n-1 under the dataset's secret ``key``, as int64 in [0, 2^32)."""
    if len(key) != BYTES:
        raise ValueError(f"a record-key secret is {BYTES} bytes")
    stream = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor().update(bytes(4 * n))
    return np.frombuffer(stream, dtype="<u4").astype(np.int64)
