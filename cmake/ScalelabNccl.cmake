# NCCL for the GPU communicator (kernels/comm). Included by kernels/CMakeLists.txt. NCCL is
# optional: when it is not found the NCCL backend is simply not compiled, and --backend nccl
# says so at run time. Found, it becomes the imported target scalelab_nccl (tests check for it).
#
# Where it looks, first match wins (headers and library must come from the same place, since a
# header newer than the library it is linked against fails in odd ways):
#   1. SCALELAB_NCCL_ROOT (CMake variable or environment variable)
#   2. NCCL_ROOT (CMake variable or environment variable)
#   3. PyTorch's pip package (nvidia-nccl-*): <venv>/lib/python3.*/site-packages/nvidia/nccl,
#      under /opt/torch/.venv (the GPU image) or the active VIRTUAL_ENV
#   4. the CUDA Toolkit (/usr/local/cuda), where the Debian machines have it
# Each root must hold include/nccl.h and lib/ (or lib64/) with libnccl.so or libnccl.so.2 (the
# pip package ships only the versioned name).
set(_nccl_roots)
foreach(_hint SCALELAB_NCCL_ROOT NCCL_ROOT)
  if(DEFINED ${_hint} AND NOT "${${_hint}}" STREQUAL "")
    list(APPEND _nccl_roots "${${_hint}}")
  endif()
  if(DEFINED ENV{${_hint}} AND NOT "$ENV{${_hint}}" STREQUAL "")
    list(APPEND _nccl_roots "$ENV{${_hint}}")
  endif()
endforeach()
set(_venvs /opt/torch/.venv)
if(DEFINED ENV{VIRTUAL_ENV})
  list(APPEND _venvs "$ENV{VIRTUAL_ENV}")
endif()
foreach(_venv IN LISTS _venvs)
  file(GLOB _pip_nccl LIST_DIRECTORIES true "${_venv}/lib/python3*/site-packages/nvidia/nccl")
  list(APPEND _nccl_roots ${_pip_nccl})
endforeach()
if(CUDAToolkit_LIBRARY_ROOT)
  list(APPEND _nccl_roots "${CUDAToolkit_LIBRARY_ROOT}")
endif()
list(APPEND _nccl_roots /usr/local/cuda)

set(SCALELAB_NCCL_FOUND OFF)
foreach(_root IN LISTS _nccl_roots)
  if(NOT EXISTS "${_root}/include/nccl.h")
    continue()
  endif()
  find_library(_nccl_lib NAMES nccl libnccl.so.2 PATHS "${_root}/lib" "${_root}/lib64" NO_DEFAULT_PATH NO_CACHE)
  if(_nccl_lib)
    set(SCALELAB_NCCL_FOUND ON)
    set(SCALELAB_NCCL_INCLUDE_DIR "${_root}/include")
    set(SCALELAB_NCCL_LIBRARY "${_nccl_lib}")
    break()
  endif()
endforeach()

if(SCALELAB_NCCL_FOUND)
  file(STRINGS "${SCALELAB_NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
         SCALELAB_NCCL_VERSION "${_nccl_version_lines}")
  add_library(scalelab_nccl UNKNOWN IMPORTED GLOBAL)
  set_target_properties(scalelab_nccl PROPERTIES IMPORTED_LOCATION "${SCALELAB_NCCL_LIBRARY}"
                                                 INTERFACE_INCLUDE_DIRECTORIES "${SCALELAB_NCCL_INCLUDE_DIR}")
  message(STATUS "scalelab: NCCL ${SCALELAB_NCCL_VERSION} at ${SCALELAB_NCCL_LIBRARY}: the nccl backend is built")
else()
  message(STATUS "scalelab: NCCL not found (looked in: ${_nccl_roots}); the nccl backend is not built. "
                 "Set SCALELAB_NCCL_ROOT to a directory with include/nccl.h and lib/libnccl.so to build it.")
endif()
