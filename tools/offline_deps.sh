#!/usr/bin/env bash
# Builds scalelab on a machine that reaches no package registry (a rented or lent GPU box with
# CUDA but no Debian mirror): on a Debian 12 machine that does, download the project's Debian
# dependencies; unpack them into a folder that travels with the source tree.
#
#   bash tools/offline_deps.sh .deps                  # here, with apt: download and unpack (~110 MB)
#   bash tools/offline_deps.sh --download-only .deps  # here: only the .deb files (~25 MB), to carry
#   bash tools/offline_deps.sh --unpack .deps         # there (needs dpkg-deb): unpack .deps/debs
#   bash tools/gpu_measure.sh --deps .deps            # there: unpacks if needed, sources .deps/env.sh
#
# Unpacking writes DEST/env.sh; `source DEST/env.sh` sets CMAKE_PREFIX_PATH, LD_LIBRARY_PATH and,
# for OpenMPI, PATH (mpirun, mpicxx), OPAL_PREFIX and PMIx's plugin path, so the unpacked copy
# runs from wherever the folder lies, next to or instead of an installed MPI.
#
# Only headers and shared libraries are kept. oneDNN (the default sgemm, SCALELAB_BLAS) needs
# libOpenCL.so.1 (ocl-icd) and libgomp (GCC's, already there). OpenBLAS and Google Benchmark from
# Debian 12 run on newer glibc versions too (checked on the GPU machine that docs/results/ names).
# OpenMPI is there because the multi-rank GPU tests and tools/gpu_parallel_check.sh start several
# ranks on one GPU with mpirun. Its network components (libfabric, UCX, verbs) are left out: on
# one machine it uses shared memory, and env.sh silences the components that cannot load.
set -euo pipefail
mode=all
case ${1:-} in
  --download-only) mode=download; shift ;;
  --unpack) mode=unpack; shift ;;
esac
dest=${1:?usage: tools/offline_deps.sh [--download-only | --unpack] DEST [extra-debian-package ...]}
given=$dest
shift
packages=(catch2 nlohmann-json3-dev libcli11-dev libbenchmark-dev libbenchmark1debian
          libopenblas-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev libgfortran5
          libdnnl-dev libdnnl2 ocl-icd-libopencl1
          openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libhwloc15 libevent-core-2.1-7
          libevent-pthreads-2.1-7 libpmix2 libltdl7 libnuma1 libmunge2 libxnvctrl0 "$@")
mkdir -p "$dest/debs"
dest=$(cd "$dest" && pwd)

if [[ $mode != unpack ]]; then
  # apt-get download runs as the _apt user where it can; a root-owned folder only gets a warning.
  (cd "$dest/debs" && apt-get download "${packages[@]}" >/dev/null 2>&1) || {
    echo "offline_deps: apt-get download failed; run 'apt-get update' first (needs Debian's registry)" >&2
    exit 1
  }
  if [[ $mode == download ]]; then
    echo "offline_deps: $(du -sh "$dest/debs" | cut -f1) of .deb files in $dest/debs"
    echo "  there: bash tools/offline_deps.sh --unpack $given"
    exit 0
  fi
fi

ls "$dest"/debs/*.deb >/dev/null 2>&1 || { echo "offline_deps: no .deb files in $dest/debs" >&2; exit 1; }
for deb in "$dest"/debs/*.deb; do dpkg-deb -x "$deb" "$dest"; done
# Debian's alternatives system normally makes these names; recreate them inside the folder.
lib=$dest/usr/lib/x86_64-linux-gnu
ln -sf openblas-pthread/libblas.so.3 "$lib/libblas.so.3"
ln -sf openblas-pthread/libopenblas.so "$lib/libopenblas.so"
for tool in mpirun mpiexec mpicc mpicxx mpic++; do ln -sf "$tool.openmpi" "$dest/usr/bin/$tool"; done
# What travels should be small: no packages, documentation, Fortran modules or static libraries,
# except those a CMake package file names (find_package fails without them): Catch2's
# libCatch2WithMain.a and Google Benchmark's libbenchmark_main.a.
rm -rf "$dest/debs" "$dest/usr/share/doc" "$dest/usr/share/man" "$lib/fortran"
find "$dest" -name '*.a' ! -name 'libCatch2*' ! -name 'libbenchmark_main.a' -delete

cat > "$dest/env.sh" <<'ENV'
# Written by tools/offline_deps.sh: source it to build and run with the unpacked dependencies,
# wherever this folder lies.
d=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
l=$d/usr/lib/x86_64-linux-gnu
export CMAKE_PREFIX_PATH=$d/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export LD_LIBRARY_PATH=$l:$l/openblas-pthread:$l/openmpi/lib:$l/pmix2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$d/usr/bin:$PATH
export OPAL_PREFIX=$d/usr                                  # OpenMPI, moved from /usr
export PMIX_MCA_mca_base_component_path=$l/pmix2/lib/pmix  # PMIx's plugins, likewise
export OMPI_MCA_mca_base_component_show_load_errors=0      # the network components left out
unset d l
ENV
echo "offline_deps: $(du -sh "$dest" | cut -f1) in $dest"
echo "  use: source $dest/env.sh (then cmake, mpirun, the tests)"
