#!/usr/bin/env bash
# Builds scalelab on a machine that reaches no package registry (a rented or lent GPU box with
# CUDA but no Debian mirror): on a Debian 12 machine that does, download the project's Debian
# dependencies and unpack them into a folder that travels with the source tree.
#
#   bash tools/offline_deps.sh .deps            # here, with apt (about 90 MB unpacked, 39 MB of it oneDNN)
#   rsync -a . gpu-box:scalelab/                 # the folder travels with the tree
#   bash tools/gpu_measure.sh --deps .deps       # there: uses .deps/usr as a CMake prefix
#
# Only headers and shared libraries are kept. oneDNN (the default sgemm, SCALELAB_BLAS) needs
# libOpenCL.so.1 (ocl-icd) and libgomp (GCC's, already there). OpenBLAS and Google Benchmark from Debian 12 run on
# newer glibc versions too (checked on the GPU machine that docs/results/ names). OpenMPI is left
# out on purpose: it pulls dozens of libraries, and one GPU needs no mpirun.
set -euo pipefail
dest=${1:?usage: tools/offline_deps.sh DEST [extra-debian-package ...]}
shift
packages=(catch2 nlohmann-json3-dev libcli11-dev libbenchmark-dev libbenchmark1debian
          libopenblas-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev libgfortran5
          libdnnl-dev libdnnl2 ocl-icd-libopencl1 "$@")
mkdir -p "$dest/debs"
dest=$(cd "$dest" && pwd)
# apt-get download runs as the _apt user where it can; a root-owned folder only gets a warning.
(cd "$dest/debs" && apt-get download "${packages[@]}" >/dev/null 2>&1) || {
  echo "offline_deps: apt-get download failed; run 'apt-get update' first (needs Debian's registry)" >&2
  exit 1
}
for deb in "$dest"/debs/*.deb; do dpkg -x "$deb" "$dest"; done
# Debian's alternatives system normally makes these names; recreate them inside the folder.
lib=$dest/usr/lib/x86_64-linux-gnu
ln -sf openblas-pthread/libblas.so.3 "$lib/libblas.so.3"
ln -sf openblas-pthread/libopenblas.so "$lib/libopenblas.so"
# What travels should be small: no packages, documentation or static libraries, except those a
# CMake package file names (find_package fails without them): Catch2's libCatch2WithMain.a and
# Google Benchmark's libbenchmark_main.a.
rm -rf "$dest/debs" "$dest/usr/share/doc" "$dest/usr/share/man"
find "$dest" -name '*.a' ! -name 'libCatch2*' ! -name 'libbenchmark_main.a' -delete
echo "offline_deps: $(du -sh "$dest" | cut -f1) in $dest"
echo "  use: cmake -DCMAKE_PREFIX_PATH=$dest/usr ...; export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread"
