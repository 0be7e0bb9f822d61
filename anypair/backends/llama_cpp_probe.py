"""The child process of `llama_cpp_guard.probe_failure`: load a GGUF on llama.cpp and decode a batch
of rows, then one row. Run as a script (not `-m`) so that it imports llama_cpp and nothing of anypair:
whatever kills it, kills only it. Prints "ok" when both decodes return.

    python llama_cpp_probe.py MODEL.gguf THREADS ROWS
"""
import os
import sys

# a script's own folder comes first on sys.path, and this one holds anypair's llama_cpp.py: drop it so
# that `import llama_cpp` finds llama-cpp-python
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]


def main(gguf: str, threads: int, rows: int) -> int:
    import llama_cpp

    llama = llama_cpp.Llama(gguf, n_ctx=max(256, 2 * rows), n_batch=rows, n_threads=threads,
                            n_threads_batch=threads, verbose=False)
    vocab = llama.n_vocab()
    llama.eval([(7 + 31 * i) % vocab for i in range(rows)])  # a batch: matrix-matrix paths
    llama.eval([(11 * rows) % vocab])  # one row: matrix-vector paths
    print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
