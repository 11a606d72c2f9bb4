"""Cost of verifying checkpoints (issue 31): hashing throughput of hashlib's digests, and of the non-finite check.

Run (package installed): ``python benchmarks/checkpoint_digest.py [--mib 512] [--repeats 5]`` (about a minute).

* ``hashlib``: MiB/s of sha256, sha1, blake2b, md5 and sha512 over the same in-memory bytes, one thread;
* ``file_digest``: MiB/s of ``trl_explore.checkpoints.file_digest`` over one file in the page cache, and of
  ``digest_files`` over two (``--mib`` MiB in all; a thread per file, as a checkpoint's weights and optimizer state)
  (what a save pays: it hashes the files it has just written; a resume reads them from the disk, at the disk's speed
  when they are not cached);
* ``isfinite``: the non-finite check's rate in values per second (float32, one tensor of 64M values):
  ``torch.isfinite(t).all()`` and ``first_nonfinite`` (a sum first, the exact check only when the sum is not finite).

Each figure is the best of ``--repeats`` (the machine's other load only slows a run down), then the costs of the main
job's checkpoint (SmolLM2-135M in float32: weights and AdamW's two moments, 12 bytes per parameter) and of a
1.5B-parameter state (float32 weights and AdamW: 18 GB) computed from them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time

import torch

from trl_explore.checkpoints.records import digest_files, file_digest, first_nonfinite

STATES = {"main job, SmolLM2-135M (134.5M parameters)": 134.5e6, "a 1.5B-parameter state": 1.5e9}
BYTES_PER_PARAMETER = 12  # float32 weights + AdamW's exp_avg and exp_avg_sq


def best_rate(work, size: float, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return size / min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data = os.urandom(args.mib << 20)
    view = memoryview(data)

    def hashing(name):
        def work():
            digest = hashlib.new(name)
            for i in range(0, len(data), 8 << 20):
                digest.update(view[i:i + (8 << 20)])
        return work

    for name in ("sha256", "sha1", "blake2b", "md5", "sha512"):
        print(f"hashlib {name:8s} {best_rate(hashing(name), args.mib, args.repeats):7.0f} MiB/s")
    with tempfile.TemporaryDirectory() as folder:
        half = len(data) // 2
        for name, part in (("weights", view[:half]), ("optimizer", view[half:])):
            with open(os.path.join(folder, name), "wb") as f:
                f.write(part)
        one_rate = best_rate(lambda: file_digest(os.path.join(folder, "weights")), args.mib / 2, args.repeats)
        file_rate = best_rate(lambda: digest_files(folder, ["weights", "optimizer"]), args.mib, args.repeats)
    print(f"file_digest (sha256, page cache) {one_rate:7.0f} MiB/s; digest_files of 2 files {file_rate:7.0f} MiB/s")
    values = torch.randn(64 << 20)
    isfinite_rate = best_rate(lambda: bool(torch.isfinite(values).all()), values.numel(), args.repeats)
    finite_rate = best_rate(lambda: first_nonfinite([("v", values)]), values.numel(), args.repeats)
    print(f"isfinite().all() {isfinite_rate / 1e9:.2f} G values/s; first_nonfinite {finite_rate / 1e9:.2f} G values/s")
    for label, params in STATES.items():
        size = params * BYTES_PER_PARAMETER
        print(f"{label}: {size / 1e9:.2f} GB, sha256 {size / 2**20 / file_rate:.1f} s, "
              f"non-finite check {3 * params / finite_rate:.2f} s")


if __name__ == "__main__":
    main()
