#!/usr/bin/env python3
"""Accord from Python through ctypes and numpy: no extension module, only libaccord.so.

Two (or more) processes, torchrun style: each gets RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT and calls accord_comm_init_from_env, then all-reduces a numpy array in place.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python3 examples/python_ctypes.py &
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python3 examples/python_ctypes.py

The library is found through ACCORD_LIB (a path) or the loader's search path (libaccord.so.0).
"""
import ctypes
import os
import sys

import numpy as np

ACCORD_SUCCESS = 0
ACCORD_INT32, ACCORD_FLOAT32, ACCORD_FLOAT64 = 2, 7, 8  # accord_datatype_t
ACCORD_SUM, ACCORD_MAX = 0, 2  # accord_red_op_t
DTYPES = {np.dtype(np.int32): ACCORD_INT32, np.dtype(np.float32): ACCORD_FLOAT32,
          np.dtype(np.float64): ACCORD_FLOAT64}


class Accord:
    def __init__(self, path=None):
        lib = ctypes.CDLL(path or os.environ.get("ACCORD_LIB", "libaccord.so.0"))
        lib.accord_last_error.restype = ctypes.c_char_p
        lib.accord_last_error.argtypes = [ctypes.c_void_p]
        lib.accord_comm_init_from_env.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        lib.accord_comm_rank.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        lib.accord_comm_count.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        lib.accord_all_reduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                          ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        lib.accord_comm_destroy.argtypes = [ctypes.c_void_p]
        self.lib = lib
        self.comm = ctypes.c_void_p()
        self._check(lib.accord_comm_init_from_env(ctypes.byref(self.comm)), "accord_comm_init_from_env")

    def _check(self, status, what):
        if status != ACCORD_SUCCESS:
            raise RuntimeError(f"{what}: {self.lib.accord_last_error(self.comm).decode()}")

    def rank_and_size(self):
        r, n = ctypes.c_int(), ctypes.c_int()
        self._check(self.lib.accord_comm_rank(self.comm, ctypes.byref(r)), "accord_comm_rank")
        self._check(self.lib.accord_comm_count(self.comm, ctypes.byref(n)), "accord_comm_count")
        return r.value, n.value

    def all_reduce(self, array, op=ACCORD_SUM):
        """In place on a contiguous numpy array."""
        if not array.flags["C_CONTIGUOUS"] or array.dtype not in DTYPES:
            raise ValueError("contiguous int32/float32/float64 arrays only in this example")
        ptr = array.ctypes.data_as(ctypes.c_void_p)
        self._check(self.lib.accord_all_reduce(ptr, ptr, array.size, DTYPES[array.dtype], op, self.comm, None),
                    "accord_all_reduce")

    def close(self):
        if self.comm:
            self.lib.accord_comm_destroy(self.comm)
            self.comm = ctypes.c_void_p()


def main():
    accord = Accord(sys.argv[1] if len(sys.argv) > 1 else None)
    rank, nranks = accord.rank_and_size()
    grads = np.arange(100003, dtype=np.float32) + rank
    accord.all_reduce(grads)
    ids = np.array([rank, -rank], dtype=np.int32)
    accord.all_reduce(ids, ACCORD_MAX)
    accord.close()
    i = np.arange(100003, dtype=np.float64)
    ok = np.array_equal(grads, (nranks * i + nranks * (nranks - 1) / 2).astype(np.float32)) and \
        ids.tolist() == [nranks - 1, 0]
    print(f"python_ctypes: rank {rank}/{nranks}: grads[-1] = {grads[-1]}, max ids {ids.tolist()}: "
          f"{'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
